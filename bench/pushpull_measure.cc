#include "bench/pushpull_measure.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace ps::pushpull {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  return v[i];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

std::vector<Result> Interleave(
    int reps, double units_per_byte,
    const std::vector<std::function<Phase()>>& runs) {
  std::vector<std::vector<double>> rates(runs.size());
  std::vector<std::vector<double>> lat(runs.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < runs.size(); ++i) {
      Phase p = runs[i]();
      rates[i].push_back(p.bytes * units_per_byte / p.seconds);
      lat[i].insert(lat[i].end(), p.latencies.begin(), p.latencies.end());
    }
  }
  std::vector<Result> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    out.push_back(
        {Median(rates[i]), Percentile(lat[i], 0.5), Percentile(lat[i], 0.99)});
  }
  return out;
}

Row Compared(std::string config, std::string unit, const Result& ours,
             const Result& base) {
  Row row(std::move(config), std::move(unit));
  row.ours = ours;
  row.base = base;
  row.has_base = true;
  return row;
}

namespace {

std::string Rate(double v, const std::string& unit) {
  return unit == "MB/s" ? absl::StrFormat("%.0f", v / 1e6)
                        : absl::StrFormat("%.0f", v);
}

}  // namespace

void PrintRow(const Row& r) {
  std::printf(
      "| %s | %s | %s | %s | %.2f / %.2f | %s |\n", r.config.c_str(),
      Rate(r.ours.rate, r.unit).c_str(),
      r.has_base ? Rate(r.base.rate, r.unit).c_str() : "-",
      r.has_base ? absl::StrFormat("%.2f", r.ours.rate / r.base.rate).c_str()
                 : "-",
      r.ours.p50 * 1e3, r.ours.p99 * 1e3,
      r.has_base
          ? absl::StrFormat("%.2f / %.2f", r.base.p50 * 1e3, r.base.p99 * 1e3)
                .c_str()
          : "-");
  std::fflush(stdout);
}

void PrintHeader(const char* unit) {
  std::printf(
      "\n| config | ours (%s) | baseline (%s) | ratio | ours p50/p99 (ms) | "
      "baseline p50/p99 (ms) |\n|---|---:|---:|---:|---:|---:|\n",
      unit, unit);
}

void Emit(const Row& row, std::vector<Row>* rows) {
  PrintRow(row);
  rows->push_back(row);
}

}  // namespace ps::pushpull
