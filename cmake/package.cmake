# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# `make package`: a Debian package of the C++ library (CPack), for C++ users: libddp.so with its
# plugins, the headers, the CMake package (find_package(ddp)) and the pkg-config file, under
# /usr. One package, libddp-dev, since ddp's public headers include Abseil's (a program built
# against it needs libabsl-dev anyway). tests/package_test.sh installs it into a scratch root and
# builds examples/cpp against it.
#
# Depends is written here, not computed by dpkg-shlibdeps: that would make the plugins' own
# libraries (Open MPI's, libfabric's, NCCL's, this last from no Debian package) hard
# dependencies, where libddp opens each plugin only if its library is there. The test checks
# that every library libddp.so itself needs comes from a package named here.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME libddp-dev)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The libddp Authors")
set(CPACK_PACKAGE_CONTACT "The libddp Authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "libddp: ${PROJECT_DESCRIPTION} (C++ library, headers, CMake and pkg-config files)")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# Abseil's ABI is its release's (libabsl20220623: the sonames and the lts_20220623 namespace the
# headers use): the package built against it needs that release, not any newer one.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1, libssl3, libabsl20220623, libabsl-dev (>= 20220623), libabsl-dev (<< 20220624)")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libopenmpi-dev, libfabric1")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # and the ldconfig trigger
# The C++ library's own install rules alone (component Unspecified), not the Python package's
# (component python), whatever else this build holds.
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};${PROJECT_NAME};Unspecified;/")
include(CPack)
