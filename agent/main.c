/* main.c - the hearth command line. */
#include <stdio.h>
int main(void) { puts("hearth"); return 0; }
