# A consumer project built against the *installed* package: install this build into a scratch prefix,
# configure tests/package/consumer with find_package(liere), build it and run it.
add_test(NAME package_consumer
  COMMAND ${CMAKE_COMMAND}
    -DLIERE_BUILD=${PROJECT_BINARY_DIR}
    -DCONSUMER_SOURCE=${CMAKE_CURRENT_SOURCE_DIR}/package/consumer
    -DWORK=${PROJECT_BINARY_DIR}/package-test
    -DGENERATOR=${CMAKE_GENERATOR}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/package/run_package_test.cmake)
set_tests_properties(package_consumer PROPERTIES TIMEOUT 600)
