// tests/pch.cpp — the one source of liere_test_pch, the target whose precompiled header the tests reuse
// (tests/CMakeLists.txt).
