// SPDX-License-Identifier: Apache-2.0
// docs/reference/cli.md against the CLIs themselves: each command's table there (flag, value,
// default, what it does) is the command's flags as dsbench and dsconvert declare them (dsbench's
// AddOptions, dsconvert's Add<Sub>), rendered by one rule (Row below). A flag added, removed or
// renamed, a default or a help text changed on one side only, fails here; the message shows the
// table as the command has it, to paste into the page. Where a help text names a page
// ("docs/SCALE.md"), the page may link it instead ("[SCALE](../SCALE.md)").
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dsbench/flags.h"
#include "dsconvert/commands.h"

namespace dspipe {
namespace {

// The value column: what the flag takes, from CLI11's type name ("INT:POSITIVE" -> "> 0",
// "TEXT:{png,jpg}" -> "png\|jpg", "FLOAT:FLOAT in [0 - 1]" -> "0..1", "UINT" -> "uint"); empty
// for a flag without a value.
std::string ValueColumn(const CLI::Option& o) {
  if (o.get_type_size_max() == 0) return "";
  std::string t = o.get_type_name();
  const size_t colon = t.find(':');
  std::string base = colon == std::string::npos ? t : t.substr(0, colon);
  std::string check = colon == std::string::npos ? "" : t.substr(colon + 1);
  std::smatch m;
  std::string v;
  if (check == "POSITIVE") {
    v = "> 0";
  } else if (check == "NONNEGATIVE") {
    v = ">= 0";
  } else if (std::regex_match(check, m, std::regex(R"(\{(.*)\})"))) {
    v = std::regex_replace(m[1].str(), std::regex(","), "\\|");
  } else if (std::regex_match(check, m, std::regex(R"(\w+ in \[(\S+) - (\S+)\])"))) {
    v = m[1].str() + ".." + m[2].str();
  } else {
    for (char& c : base) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    v = base;
  }
  if (o.get_delimiter() != '\0') v += std::string(1, o.get_delimiter()) + " ...";
  return v;
}

// One row of the page's table: "| `--flag` | value | `default` | help (not with `--x`) |".
std::string Row(const CLI::App& app, const CLI::Option& o) {
  std::string names;
  for (const std::string& s : o.get_snames()) names += (names.empty() ? "-" : ", -") + s;
  for (const std::string& l : o.get_lnames()) names += (names.empty() ? "--" : ", --") + l;
  std::string help = std::regex_replace(o.get_description(), std::regex(R"(\|)"), "\\|");
  std::string excl;  // in the order the flags are declared
  const std::set<CLI::Option*> excludes = o.get_excludes();
  for (const CLI::Option* x : app.get_options()) {
    if (!excludes.count(const_cast<CLI::Option*>(x))) continue;
    excl += (excl.empty() ? "" : ", ") + std::string("`") + x->get_name() + "`";
  }
  if (!excl.empty()) help += " (not with " + excl + ")";
  const std::string def = o.get_default_str().empty() || o.get_type_size_max() == 0
                              ? ""
                              : "`" + o.get_default_str() + "`";
  std::string value = ValueColumn(o);
  return "| `" + names + "` | " + value + " | " + def + " | " + help + " |";
}

std::vector<std::string> Rows(const CLI::App& app) {
  std::vector<std::string> rows;
  for (const CLI::Option* o : app.get_options()) {
    if (!o->nonpositional() || o->get_name() == "--help") continue;
    rows.push_back(Row(app, *o));
  }
  return rows;
}

// The table rows of the page's section "## TITLE", markdown links removed from the text.
std::vector<std::string> PageRows(const std::string& title) {
  std::ifstream in(std::string(DSPIPE_SOURCE_DIR) + "/docs/reference/cli.md");
  std::vector<std::string> rows;
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## " + title;
    if (!in_section || line.rfind("| `-", 0) != 0) continue;
    rows.push_back(std::regex_replace(
        line, std::regex(R"(\[[^\]]*\]\(\.\./([A-Za-z_]+\.md)[^)]*\))"), "docs/$1"));
  }
  return rows;
}

void ExpectPageHas(const std::string& title, const CLI::App& app) {
  const std::vector<std::string> want = Rows(app);
  const std::vector<std::string> have = PageRows(title);
  std::string table;
  for (const std::string& r : want) table += r + "\n";
  EXPECT_EQ(have, want) << "docs/reference/cli.md, section \"## " << title
                        << "\", is not the command's --help; the command has:\n"
                        << table;
}

TEST(CliReference, DsbenchTableIsItsHelp) {
  CLI::App app;
  cli::dsbench::Args a;
  cli::dsbench::AddOptions(app, &a);
  ExpectPageHas("dsbench", app);
}

TEST(CliReference, DsconvertTablesAreTheirHelp) {
  namespace d = cli::dsconvert;
  CLI::App app;
  d::SynthArgs synth;
  d::BuildArgs build;
  d::AssembleArgs assemble;
  d::VerifyArgs verify;
  d::InfoArgs info;
  d::PushArgs push;
  d::FetchArgs fetch;
  ExpectPageHas("dsconvert synth", *d::AddSynth(app, &synth));
  DecodeLimits limits;
  CLI::App* build_app = d::AddBuild(app, &build);
  CLI::App* verify_app = d::AddVerify(app, &verify);
  CLI::App* info_app = d::AddInfo(app, &info);
  for (CLI::App* sub : {build_app, verify_app, info_app}) d::AddDecodeLimits(sub, &limits);
  ExpectPageHas("dsconvert build", *build_app);
  ExpectPageHas("dsconvert assemble", *d::AddAssemble(app, &assemble));
  ExpectPageHas("dsconvert verify", *verify_app);
  ExpectPageHas("dsconvert info", *info_app);
  ExpectPageHas("dsconvert push", *d::AddPush(app, &push));
  ExpectPageHas("dsconvert fetch", *d::AddFetch(app, &fetch));
}

}  // namespace
}  // namespace dspipe
