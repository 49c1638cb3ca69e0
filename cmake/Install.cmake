# Installation and packaging: `cmake --install build/release [--prefix P]` puts the memplan binary
# in bin/ (and the CUDA backend's module in lib/memplan/), its man page (generated from --help at build time, cmake/help_to_docs.py) in
# share/man/man1/ and its bash completion in share/bash-completion/completions/; `cpack` in the
# build folder makes a Debian package of the same files (tests/install/ checks both).
include(GNUInstallDirs)
find_package(Python REQUIRED COMPONENTS Interpreter)  # FindPython, as pybind11 uses it

set(MEMPLAN_MAN_PAGE ${PROJECT_BINARY_DIR}/share/memplan.1)
set(MEMPLAN_COMPLETION ${PROJECT_BINARY_DIR}/share/memplan.bash)
add_custom_command(
  OUTPUT ${MEMPLAN_MAN_PAGE} ${MEMPLAN_COMPLETION}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/share
  COMMAND Python::Interpreter ${PROJECT_SOURCE_DIR}/cmake/help_to_docs.py $<TARGET_FILE:memplan>
          ${PROJECT_VERSION} ${MEMPLAN_MAN_PAGE} ${MEMPLAN_COMPLETION}
  DEPENDS memplan ${PROJECT_SOURCE_DIR}/cmake/help_to_docs.py
  COMMENT "Generating memplan's man page and bash completion from --help"
  VERBATIM)
add_custom_target(memplan_docs ALL DEPENDS ${MEMPLAN_MAN_PAGE} ${MEMPLAN_COMPLETION})

install(TARGETS memplan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The CUDA backend's module, a private library where the binary looks for it (bin/../lib/memplan).
if(TARGET memplan_cuda_module)
  install(TARGETS memplan_cuda_module LIBRARY DESTINATION lib/memplan)
endif()
install(FILES ${MEMPLAN_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${MEMPLAN_COMPLETION} DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME memplan)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME memplan)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "memplan maintainers <memplan@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "plan GPU memory for training steps that do not fit (simulate, compare, search, validate)")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # dependencies from the linked libraries (dpkg-shlibdeps)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
include(CPack)
