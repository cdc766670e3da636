// Catch2 v2/v3 compatibility: Debian 12 ships v2.13 (catch2/catch.hpp), newer systems v3.
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define VITDDP_CATCH_V3 1
#else
#include <catch2/catch.hpp>
#endif
