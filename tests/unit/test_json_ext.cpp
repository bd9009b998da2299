// JSON with NaN/Infinity (what Python's json.dumps writes): untrusted text, read and written.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "util/json_ext.hpp"

using namespace tune;
using json = nlohmann::json;

TEST_CASE("parse_json_ext reads NaN, Infinity and -Infinity as numbers, nowhere else", "[util]") {
  auto j = util::parse_json_ext(
      R"({"a": NaN, "b": Infinity, "c": -Infinity, "d": null, "e": [1, NaN, null, -Infinity],)"
      R"( "s": "NaN", "t": "x\" Infinity", "NaN": 2})");
  REQUIRE(j.is_object());
  CHECK(std::isnan(j["a"].get<double>()));
  CHECK(j["b"].get<double>() == std::numeric_limits<double>::infinity());
  CHECK(j["c"].get<double>() == -std::numeric_limits<double>::infinity());
  CHECK(j["d"].is_null());
  CHECK(j["e"][0] == 1);
  CHECK(std::isnan(j["e"][1].get<double>()));
  CHECK(j["e"][2].is_null());
  CHECK(j["e"][3].get<double>() == -std::numeric_limits<double>::infinity());
  // A string never becomes a number, whatever it spells.
  CHECK(j["s"] == "NaN");
  CHECK(j["t"] == "x\" Infinity");
  CHECK(j["NaN"] == 2);
  for (const char* bad : {R"({"a": nan})", R"({"a": -NaN})", R"({"a": +Infinity})",
                          R"({"a": NaNa})", R"({"a": Infinityy})", R"({"a": NaN)", R"({"a": inf})",
                          "{\"a\": \"x\xffy\", \"b\": NaN}", R"({"a": "NaN})"})
    CHECK(util::parse_json_ext(bad).is_discarded());
}

TEST_CASE("parse_json_ext refuses nesting deeper than asked, without recursing", "[util]") {
  std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK(util::parse_json_ext(deep).is_discarded());
  CHECK(util::parse_json_ext(deep, 200000).is_object());
  std::string ok = "{\"a\":" + std::string(10, '[') + std::string(10, ']') + ",\"b\":NaN}";
  CHECK(util::parse_json_ext(ok, 11).is_object());
  CHECK(util::parse_json_ext(ok, 10).is_discarded());
}

TEST_CASE("dump_json_ext writes what nlohmann writes, with non-finite numbers as tokens",
          "[util]") {
  json plain = {{"loss", 0.25}, {"n", 3}, {"s", "a\"b"}, {"v", {1, 2.5, nullptr}}};
  CHECK(util::dump_json_ext(plain) == plain.dump());
  CHECK_FALSE(util::has_non_finite(plain));
  json odd = {{"loss", std::nan("")},
              {"hi", std::numeric_limits<double>::infinity()},
              {"v", {1e-5, -std::numeric_limits<double>::infinity(), "NaN"}},
              {"k\"ey", {{"x", 0.1}}}};
  CHECK(util::has_non_finite(odd));
  std::string text = util::dump_json_ext(odd);
  CHECK(text == R"({"hi":Infinity,"k\"ey":{"x":0.1},"loss":NaN,"v":[1e-05,-Infinity,"NaN"]})");
  // Round trip.
  json back = util::parse_json_ext(text);
  REQUIRE(back.is_object());
  CHECK(std::isnan(back["loss"].get<double>()));
  CHECK(back["hi"] == odd["hi"]);
  CHECK(back["v"][1] == odd["v"][1]);
  CHECK(back["v"][2] == "NaN");
  CHECK(util::dump_json_ext(back) == text);
  // Invalid UTF-8 in a string is replaced (as dump() with error_handler_t::replace does).
  json bad = {{"s", std::string("x\xffy")}, {"n", std::nan("")}};
  CHECK(util::dump_json_ext(bad) == "{\"n\":NaN,\"s\":\"x\xef\xbf\xbdy\"}");
}
