# Finds optional dependencies. Each feature has an option CHORUS_WITH_<X> that defaults ON when
# the package is found; forcing it ON without the package is an error.

macro(chorus_feature name found)
  if(${found})
    option(CHORUS_WITH_${name} "Build with ${name}" ON)
  else()
    option(CHORUS_WITH_${name} "Build with ${name}" OFF)
    if(CHORUS_WITH_${name})
      message(FATAL_ERROR "CHORUS_WITH_${name}=ON but ${name} was not found")
    endif()
  endif()
  if(CHORUS_WITH_${name})
    list(APPEND CHORUS_FEATURES ${name})
  endif()
endmacro()

# MPI (OpenMPI from Debian): the chorus::mpi target and chorusCommInitMPI.
find_package(MPI COMPONENTS C QUIET)
chorus_feature(MPI MPI_C_FOUND)

# hwloc: CPU/NUMA/PCI detection.
set(_hwloc_found FALSE)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc)
  if(HWLOC_FOUND)
    set(_hwloc_found TRUE)
  endif()
endif()
chorus_feature(HWLOC _hwloc_found)

# UCX.
set(_ucx_found FALSE)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(UCX QUIET IMPORTED_TARGET ucx)
  if(UCX_FOUND)
    set(_ucx_found TRUE)
  endif()
endif()
chorus_feature(UCX _ucx_found)

# libibverbs (rdma-core).
find_library(IBVERBS_LIBRARY ibverbs)
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
set(_ibv_found FALSE)
if(IBVERBS_LIBRARY AND IBVERBS_INCLUDE_DIR)
  set(_ibv_found TRUE)
endif()
chorus_feature(IBVERBS _ibv_found)

# CUDA: compiles here (nvcc), runs only where a GPU exists.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
set(_cuda_found FALSE)
if(CMAKE_CUDA_COMPILER)
  set(_cuda_found TRUE)
endif()
chorus_feature(CUDA _cuda_found)

# The feature string (chorusGetBuildFeatures, chorus-info) names what this build really has:
# the registered transports (added at run time from the registry) and the components below that
# are compiled in. A package that is found but that no component uses yet is not a feature.
set(_built "")
if(CHORUS_WITH_HWLOC)
  list(APPEND _built hwloc)
endif()
if(CHORUS_WITH_IBVERBS)
  list(APPEND _built ibverbs-detect)
endif()
if(CHORUS_WITH_MPI)
  list(APPEND _built mpi)
endif()
if(CHORUS_WITH_CUDA)
  list(APPEND _built cuda-kernels)
endif()
string(REPLACE ";" " " CHORUS_FEATURES_STRING "${_built}")
message(STATUS "chorus components: ${CHORUS_FEATURES_STRING} (plus the registered transports)")

function(chorus_apply_features target)
  target_compile_definitions(${target} PUBLIC
    CHORUS_FEATURES_STRING="${CHORUS_FEATURES_STRING}")
  if(CHORUS_WITH_HWLOC)
    target_compile_definitions(${target} PUBLIC CHORUS_HAVE_HWLOC=1)
    target_link_libraries(${target} PUBLIC PkgConfig::HWLOC)
  endif()
  if(CHORUS_WITH_IBVERBS)
    target_compile_definitions(${target} PUBLIC CHORUS_HAVE_IBVERBS=1)
  endif()
endfunction()
