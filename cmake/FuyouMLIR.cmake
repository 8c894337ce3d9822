# Debian bookworm's LLVM/MLIR 19. Everything links libMLIR.so (never the
# component archives as well: two copies of the MLIR registries break at run time).
find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-19/lib/cmake/mlir)
message(STATUS "Using MLIR ${MLIR_DIR}, LLVM ${LLVM_PACKAGE_VERSION}")
list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)
include(HandleLLVMOptions)

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
include_directories(${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_definitions(${LLVM_DEFINITIONS})

find_program(FUYOU_LIT lit.py HINTS /usr/lib/llvm-19/build/utils/lit NO_DEFAULT_PATH)
if(NOT FUYOU_LIT)
  set(FUYOU_LIT /usr/lib/llvm-19/build/utils/lit/lit.py)
endif()
set(LLVM_EXTERNAL_LIT ${FUYOU_LIT} CACHE STRING "" FORCE)

# Compiler libraries: plain static libraries over libMLIR.so, no RTTI like LLVM.
function(fuyou_compiler_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;LINK" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  if(ARG_DEPENDS)
    add_dependencies(${name} ${ARG_DEPENDS})
  endif()
  target_link_libraries(${name} PUBLIC MLIR LLVM ${ARG_LINK})
  target_compile_options(${name} PRIVATE -fno-rtti)
endfunction()
