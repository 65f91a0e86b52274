# CMake toolchain file: cross-build hearth for aarch64 Linux on a Debian host
# with crossbuild-essential-arm64 and the :arm64 multiarch -dev packages
# (deploy/install-deps.sh --arm64 installs them). Tests run under
# qemu-aarch64-static (the CTest emulator below; -cpu max exposes asimd,
# asimddp, i8mm and sve).
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=deploy/aarch64.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# libraries and headers: the multiarch folders, never the host's x86 ones
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu)

# pkg-config reads only the arm64 .pc files (and arch-independent ones)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# how CTest runs the test executables; HR_QEMU_CPU picks the emulated core
if(NOT DEFINED HR_QEMU_CPU)
  set(HR_QEMU_CPU max)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -cpu ${HR_QEMU_CPU})
