// SPDX-License-Identifier: Apache-2.0
// A minimal DICOM writer for tests: one-frame, explicit VR little endian, every element the
// volume reader looks at, each one overridable or removable so a test can write the bad files
// a reader meets (tests/python/test_dicom.py writes good series with pydicom instead).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dspipe::testing {

struct DicomSpec {
  int rows = 3, cols = 4;
  double ipp[3] = {0, 0, 0};
  double iop[6] = {1, 0, 0, 0, 1, 0};
  double spacing[2] = {1, 1};  // between rows, between columns
  double slope = 1, inter = 0;
  int bits = 16, bits_stored = 16, pixel_representation = 0;
  std::string series = "1.2.3.4";
  std::vector<uint8_t> pixels;  // rows*cols samples of `bits`, little endian
  // Elements replaced (by their value string, before padding) or left out, by (group << 16 |
  // element).
  std::map<uint32_t, std::string> text;
  std::set<uint32_t> omit;
  size_t cut = 0;  // bytes cut from the end of the file
  // Another transfer syntax, with the pixels as encapsulated fragments (then `pixels` is
  // unused): e.g. JPEG 2000's "1.2.840.10008.1.2.4.90".
  std::string transfer_syntax = "1.2.840.10008.1.2.1";
  std::vector<std::string> fragments;
};

inline std::string DicomNumbers(const double* v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    char b[32];
    std::snprintf(b, sizeof b, "%.10g", v[i]);
    s += (i ? "\\" : "") + std::string(b);
  }
  return s;
}

inline void WriteDicom(const std::string& path, const DicomSpec& d) {
  struct Element {
    std::string vr;
    std::string value;
  };
  auto us = [](int v) {
    std::string s(2, '\0');
    s[0] = static_cast<char>(v & 0xff);
    s[1] = static_cast<char>((v >> 8) & 0xff);
    return s;
  };
  std::map<uint32_t, Element> e;
  e[0x00080016] = {"UI", "1.2.840.10008.5.1.4.1.1.2"};
  e[0x00080018] = {"UI", "1.2.3.4.5." + std::to_string(d.ipp[2] * 1000)};
  e[0x00080060] = {"CS", "CT"};
  e[0x0020000e] = {"UI", d.series};
  e[0x00200032] = {"DS", DicomNumbers(d.ipp, 3)};
  e[0x00200037] = {"DS", DicomNumbers(d.iop, 6)};
  e[0x00280002] = {"US", us(1)};
  e[0x00280004] = {"CS", "MONOCHROME2"};
  e[0x00280010] = {"US", us(d.rows)};
  e[0x00280011] = {"US", us(d.cols)};
  e[0x00280030] = {"DS", DicomNumbers(d.spacing, 2)};
  e[0x00280100] = {"US", us(d.bits)};
  e[0x00280101] = {"US", us(d.bits_stored)};
  e[0x00280102] = {"US", us(d.bits_stored - 1)};
  e[0x00280103] = {"US", us(d.pixel_representation)};
  e[0x00281052] = {"DS", DicomNumbers(&d.inter, 1)};
  e[0x00281053] = {"DS", DicomNumbers(&d.slope, 1)};
  e[0x7fe00010] = {d.bits == 8 ? "OB" : "OW",
                   std::string(reinterpret_cast<const char*>(d.pixels.data()), d.pixels.size())};
  for (const auto& [tag, v] : d.text) {
    const auto it = e.find(tag);
    const std::string vr = it != e.end() ? it->second.vr : "IS";
    e[tag] = {vr, vr == "US" ? us(std::stoi(v)) : v};
  }
  for (uint32_t tag : d.omit) e.erase(tag);
  std::string encapsulated;  // the Pixel Data element, written after the others
  if (!d.fragments.empty()) {
    e.erase(0x7fe00010);
    auto u16 = [&](uint32_t x) {
      encapsulated.push_back(static_cast<char>(x & 0xff));
      encapsulated.push_back(static_cast<char>((x >> 8) & 0xff));
    };
    auto u32 = [&](uint32_t x) {
      u16(x & 0xffff);
      u16(x >> 16);
    };
    u16(0x7fe0), u16(0x0010), encapsulated += "OB", u16(0), u32(0xffffffffu);
    u16(0xfffe), u16(0xe000), u32(0);  // an empty offset table
    for (std::string f : d.fragments) {
      if (f.size() % 2) f.push_back('\0');
      u16(0xfffe), u16(0xe000), u32(static_cast<uint32_t>(f.size()));
      encapsulated += f;
    }
    u16(0xfffe), u16(0xe0dd), u32(0);
  }

  auto put = [](std::string* out, uint32_t tag, const Element& el) {
    std::string v = el.value;
    if (v.size() % 2) v.push_back(el.vr == "UI" || el.vr == "OB" ? '\0' : ' ');
    auto u16 = [&](uint32_t x) {
      out->push_back(static_cast<char>(x & 0xff));
      out->push_back(static_cast<char>((x >> 8) & 0xff));
    };
    u16(tag >> 16);
    u16(tag & 0xffff);
    *out += el.vr;
    if (el.vr == "OB" || el.vr == "OW") {
      u16(0);
      u16(static_cast<uint32_t>(v.size()) & 0xffff);
      u16(static_cast<uint32_t>(v.size()) >> 16);
    } else {
      u16(static_cast<uint32_t>(v.size()));
    }
    *out += v;
  };
  std::string meta;
  put(&meta, 0x00020001, {"OB", std::string("\0\1", 2)});
  put(&meta, 0x00020002, {"UI", e[0x00080016].value});
  put(&meta, 0x00020003, {"UI", "1.2.3.4.5.6"});
  put(&meta, 0x00020010, {"UI", d.transfer_syntax});
  std::string file(128, '\0');
  file += "DICM";
  std::string len(4, '\0');
  const uint32_t n = static_cast<uint32_t>(meta.size());
  for (int i = 0; i < 4; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  put(&file, 0x00020000, {"UL", len});
  file += meta;
  for (const auto& [tag, el] : e) put(&file, tag, el);
  file += encapsulated;
  file.resize(file.size() - std::min(d.cut, file.size()));
  std::ofstream(path, std::ios::binary)
      .write(file.data(), static_cast<std::streamsize>(file.size()));
}

// rows*cols 16-bit samples, little endian.
inline std::vector<uint8_t> DicomPixels16(const std::vector<int>& values) {
  std::vector<uint8_t> p;
  for (int v : values) {
    p.push_back(static_cast<uint8_t>(v & 0xff));
    p.push_back(static_cast<uint8_t>((v >> 8) & 0xff));
  }
  return p;
}

}  // namespace dspipe::testing
