# Unit tests: every tests/unit/test_*.c is one executable and one ctest.
file(GLOB SHARDC_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${SHARDC_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE ${SHARDC_WARN})
  target_link_libraries(${name} PRIVATE shardc_core)
  add_test(NAME unit/${name} COMMAND ${name}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/tests)
endforeach()

# Script tests: golden IR dumps, diagnostics corpus, samples, CLI.
set(SHARDC_BIN $<TARGET_FILE:shardc>)
add_test(NAME golden/ir COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/golden.sh ${SHARDC_BIN})
add_test(NAME diag/corpus COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/diag.sh ${SHARDC_BIN})
add_test(NAME cli/driver COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli.sh ${SHARDC_BIN})
add_test(NAME samples/check COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/samples.sh ${SHARDC_BIN})
add_test(NAME fuzz/regressions COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz_regress.sh ${SHARDC_BIN})
