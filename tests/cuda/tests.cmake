# The CUDA kernels' tests on the host build (libshardrt_cuda_host, see
# runtime/cuda/CMakeLists.txt), so that CI without a GPU runs them:
#   cuda/shim       tests/cuda/test_shim.cc: the host shim itself
#   cuda/k_<family> tests/cuda/test_k_<family>.cu: each launcher against the
#                   cpu kernel (rt_<name>_f32 from shardrt) on random inputs;
#                   cuda/k_<family>/reverse: the same, threads and blocks
#                   run in reverse order
# Included from tests/tests.cmake, at the top level (C++ must be enabled in
# the directory of the targets that use it); shardrt and shardrt_cuda_host
# come later from runtime/, which target names allow.
enable_language(CXX)
set(SHARDC_CUDA_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})

# .cu as host C++: compiled through a one-line .cc that includes it (the
# same trick as the library's).
function(shardc_cuda_host_test name src)
  add_executable(${name} ${src})
  set_target_properties(${name} PROPERTIES
                        CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
  target_compile_options(${name} PRIVATE ${SHARDC_WARN} -ffp-contract=off)
  target_link_libraries(${name} PRIVATE shardrt_cuda_host shardrt)
endfunction()

shardc_cuda_host_test(cuda_test_shim ${SHARDC_CUDA_TEST_DIR}/test_shim.cc)
add_test(NAME cuda/shim COMMAND cuda_test_shim)
set_tests_properties(cuda/shim PROPERTIES TIMEOUT 60)
add_test(NAME cuda/shim/reverse COMMAND cuda_test_shim)
set_tests_properties(cuda/shim/reverse PROPERTIES TIMEOUT 60 ENVIRONMENT "RTCH_REVERSE=1")

file(GLOB SHARDC_CUDA_TESTS CONFIGURE_DEPENDS ${SHARDC_CUDA_TEST_DIR}/test_k_*.cu)
foreach(src ${SHARDC_CUDA_TESTS})
  get_filename_component(name ${src} NAME_WE)
  string(REPLACE "test_k_" "" family ${name})
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/cuda_host_tests/${name}.cc)
  file(CONFIGURE OUTPUT ${wrapper}
       CONTENT "/* generated: ${name}.cu as host C++ (-DRTC_HOST) */\n#include \"${src}\"\n")
  shardc_cuda_host_test(cuda_${name} ${wrapper})
  add_test(NAME cuda/k_${family} COMMAND cuda_${name} WORKING_DIRECTORY ${SHARDC_CUDA_TEST_DIR})
  # Tests print "SKIP: why" and exit 77 when a prerequisite is missing.
  set_tests_properties(cuda/k_${family} PROPERTIES
                       SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
  # again with the blocks and a block's threads run last first (cuda_host.cc
  # RTCH_REVERSE): a read of another thread's or block's write that no
  # barrier orders reads it unwritten in one of the two runs
  add_test(NAME cuda/k_${family}/reverse COMMAND cuda_${name}
           WORKING_DIRECTORY ${SHARDC_CUDA_TEST_DIR})
  set_tests_properties(cuda/k_${family}/reverse PROPERTIES
                       SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "RTCH_REVERSE=1;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
endforeach()

# The attention launchers' shared-memory check: on a GPU whose blocks may
# have 99 KB (sm_86/sm_89, played by the shim), head dim 128 stops with a
# clear error before its launch
add_test(NAME cuda/k_attention_smem COMMAND cuda_test_k_attention
         WORKING_DIRECTORY ${SHARDC_CUDA_TEST_DIR})
set_tests_properties(cuda/k_attention_smem PROPERTIES
                     ENVIRONMENT "RTCH_SMEM_OPTIN=101376;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2"
                     TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "the attention kernel at head dim 128 needs [0-9]+ bytes of shared memory a block; this GPU allows 101376")

# The collectives' launchers (rtc_dist.cu, rtc_summa.cu, rtc_normsplit.cu,
# on MPI through host/nccl_host.h) against the cpu functions under mpirun:
#   cuda/vpce       the vocab-parallel cross-entropy (dist.h), 2 and 4 ranks
#   cuda/summa      SUMMA matmuls (dist_summa.h), a 2x2 and a 3x3 grid
#   cuda/normsplit  split-channel layernorm/rmsnorm (dist_summa.h), 2 and 4
#                   ranks (tp, dp and the tp2d grid's axes)
#   cuda/coll_bf16  the collectives' bf16 overloads (rtc_dist.cu), 2 and 4 ranks
#   cuda/ring       ring attention (rtc_ring.cu) and its merge against the
#                   single-device attention, 2 and 4 ranks on the sp axis
# shardc_cuda_mpi_test(NAME TIMEOUT NP...): tests/cuda/test_NAME.cu as host
# C++, registered as cuda/NAME/npN for each N.
function(shardc_cuda_mpi_test name timeout)
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/cuda_host_tests/test_${name}.cc)
  file(CONFIGURE OUTPUT ${wrapper}
       CONTENT "/* generated: test_${name}.cu as host C++ (-DRTC_HOST) */\n#include \"${SHARDC_CUDA_TEST_DIR}/test_${name}.cu\"\n")
  shardc_cuda_host_test(cuda_test_${name} ${wrapper})
  target_link_libraries(cuda_test_${name} PRIVATE shardrt_cuda_dist_host)
  # libshardrt_cuda_dist_host is C++ that includes mpi.h: as `shardc build
  # --target cuda-host` links it with mpicxx, MPI's C++ library too
  if(TARGET MPI::MPI_CXX)
    target_link_libraries(cuda_test_${name} PRIVATE MPI::MPI_CXX)
  endif()
  foreach(np ${ARGN})
    add_test(NAME cuda/${name}/np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:cuda_test_${name}>)
    set_tests_properties(cuda/${name}/np${np} PROPERTIES
                         SKIP_RETURN_CODE 77 TIMEOUT ${timeout}
                         ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  find_package(MPI COMPONENTS CXX QUIET)
  shardc_cuda_mpi_test(vpce 120 2 4)
  shardc_cuda_mpi_test(summa 180 4 9)
  shardc_cuda_mpi_test(normsplit 120 2 4)
  shardc_cuda_mpi_test(coll_bf16 120 2 4)
  shardc_cuda_mpi_test(ring 120 2 4)
endif()

# The CUDA programs (issue 10): every CUDA/cuBLASLt/NCCL call checked; the
# tiny GPT and plans on 2-4 ranks trained through the host build of their
# CUDA programs against the cpu target; every sample and strategy of the
# equivalence matrix built by nvcc (skipped without nvcc).
add_test(NAME cuda/checked-calls COMMAND ${CMAKE_CURRENT_LIST_DIR}/checked.sh ${SHARDC_BIN})
add_test(NAME cuda/programs COMMAND ${CMAKE_CURRENT_LIST_DIR}/programs.sh ${SHARDC_BIN})
add_test(NAME cuda/build-all COMMAND ${CMAKE_CURRENT_LIST_DIR}/build_all.sh ${SHARDC_BIN} 2)
# Shampoo and Adafactor (issue 13): the host build of their CUDA programs
# trains 30 steps against the cpu target, 1 rank and dp=2.
add_test(NAME cuda/optim2 COMMAND ${CMAKE_CURRENT_LIST_DIR}/optim2.sh ${SHARDC_BIN})
if(SHARDC_SANITIZE)
  set(SHARDC_CUDA_OPTIM2_ENV "OPTIM2_QUICK=1")
else()
  set(SHARDC_CUDA_OPTIM2_ENV "OPTIM2_QUICK=")
endif()
set_tests_properties(cuda/optim2 PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;${SHARDC_CUDA_OPTIM2_ENV}")
set_tests_properties(cuda/checked-calls PROPERTIES TIMEOUT 120)
# Under the sanitizers (a second pass over the same programs, for CI's time)
# only one mesh plan runs.
if(SHARDC_SANITIZE)
  set(SHARDC_CUDA_PROGRAMS_ENV "CUDA_PROGRAMS_QUICK=1")
else()
  set(SHARDC_CUDA_PROGRAMS_ENV "CUDA_PROGRAMS_QUICK=")
endif()
set_tests_properties(cuda/programs PROPERTIES TIMEOUT 1500 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;${SHARDC_CUDA_PROGRAMS_ENV}")
set_tests_properties(cuda/build-all PROPERTIES TIMEOUT 1500 SKIP_RETURN_CODE 77)
