# Installs headers, libchorus.so (+ libchorus_mpi.so), tools, a CMake package and chorus.pc.
install(DIRECTORY include/chorus DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS chorus EXPORT chorusTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET chorus_mpi)
  install(TARGETS chorus_mpi EXPORT chorusTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(EXPORT chorusTargets NAMESPACE chorus::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)

set(CHORUS_CONFIG_WITH_MPI ${CHORUS_WITH_MPI})
configure_package_config_file(cmake/chorusConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/chorusConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/chorusConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/chorusConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/chorusConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)

configure_file(cmake/chorus.pc.in ${CMAKE_CURRENT_BINARY_DIR}/chorus.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/chorus.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
