// The series table (src/io/series.h): docs/schema.md agrees with it; the gathered row, the file's
// datasets and the progress line keep the layout and text they had before the table existed.
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/io/series.h"
#include "src/app/timed_window.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;

namespace {

/// One row of a series table in docs/schema.md: | `name` | dtype | units | shape | meaning |.
struct DocRow {
  std::string dtype, units, shape;
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

/// The rows of the series tables (header "| series | dtype | units | shape | meaning |") of the
/// "### <heading>" section of docs/schema.md (up to the next heading).
/// Fails the test on a malformed or repeated row.
std::map<std::string, DocRow> doc_series(const std::string& heading) {
  std::ifstream f(std::string(VITDDP_TEST_DATA) + "/../../docs/schema.md");
  REQUIRE(f.good());
  std::map<std::string, DocRow> rows;
  std::string line;
  bool in = false, found = false, table = false;
  while (std::getline(f, line)) {
    if (line.rfind("#", 0) == 0) {
      in = line.rfind("### " + heading, 0) == 0;
      found = found || in;
      continue;
    }
    if (line.rfind("|", 0) != 0) table = false;
    if (line.rfind("| series |", 0) == 0) table = true;  // a series table's header row
    if (!in || !table || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string c; std::getline(ss, c, '|');) cells.push_back(trim(c));
    INFO(line);
    REQUIRE(cells.size() >= 5);
    REQUIRE(cells[0].size() > 2);
    const std::string name = cells[0].substr(1, cells[0].size() - 2);  // without the backquotes
    REQUIRE(rows.count(name) == 0);
    rows[name] = DocRow{cells[1], cells[2], cells[3]};
  }
  REQUIRE(found);
  return rows;
}

/// Every series of `table` is documented in section `heading` with its dtype, units and shape,
/// and the section documents no other series.
void check_section(const std::vector<SeriesDef>& table, const std::string& heading) {
  const std::map<std::string, DocRow> doc = doc_series(heading);
  std::set<std::string> names;
  for (const SeriesDef& s : table) {
    INFO("series " << s.name << " in docs/schema.md, section " << heading);
    names.insert(s.name);
    const auto it = doc.find(s.name);
    REQUIRE(it != doc.end());
    CHECK(it->second.dtype == dtype_name(s.dtype));
    CHECK(it->second.units == s.units);
    CHECK(it->second.shape == axes_shape(s.axes));
  }
  for (const auto& [name, row] : doc) {
    INFO("docs/schema.md, section " << heading << ", lists " << name);
    CHECK(names.count(name) == 1);
  }
}

StepRecord sample_record(size_t buckets) {
  StepRecord r;
  r.data_wait_ms = 1.5;
  r.input_wait_ms = 0.25;
  r.forward_ms = 10.125;
  r.backward_ms = 20.5;
  r.exposed_comm_ms = 3.75;
  r.optimizer_ms = 2.0;
  r.step_ms = 36.625;
  r.wall_ms = 40.0;
  r.loss = 2.302585;
  r.start_ms = 1000.0;
  r.backward_end_ms = 30.875;
  r.nonfinite = true;
  r.buckets.resize(buckets);
  for (size_t b = 0; b < buckets; ++b) {
    r.buckets.start_ms[b] = 5.0 + b;
    r.buckets.end_ms[b] = 7.5 + b;
    r.buckets.bytes_sent[b] = 4096 * (b + 1);
    r.buckets.compressed[b] = (uint8_t)(b % 2);
    r.buckets.compress_ms[b] = 0.125 * b;
    r.buckets.allreduce_ms[b] = 1.25 + b;
    r.buckets.copy_ms[b] = 0.5 * b;
    r.buckets.reduce_scattered[b] = (uint8_t)(b % 2);
    r.buckets.allgather_start_ms[b] = 40.0 + b;
    r.buckets.allgather_end_ms[b] = 40.75 + b;
    r.buckets.allgather_ms[b] = 0.5 + b;
    r.buckets.allgather_bytes[b] = 4096 * (b + 1);
  }
  return r;
}

std::vector<double> read_f64(hid_t file, const char* name) {
  hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  REQUIRE(d >= 0);
  hid_t sp = H5Dget_space(d);
  std::vector<double> v((size_t)H5Sget_simple_extent_npoints(sp));
  REQUIRE(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  hid_t t = H5Dget_type(d);
  CHECK(H5Tget_class(t) == H5T_FLOAT);
  H5Tclose(t);
  H5Sclose(sp);
  H5Dclose(d);
  return v;
}

std::vector<int64_t> read_i64(hid_t file, const char* name) {
  hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  REQUIRE(d >= 0);
  hid_t sp = H5Dget_space(d);
  std::vector<int64_t> v((size_t)H5Sget_simple_extent_npoints(sp));
  REQUIRE(H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  hid_t t = H5Dget_type(d);
  CHECK(H5Tget_class(t) == H5T_INTEGER);
  H5Tclose(t);
  H5Sclose(sp);
  H5Dclose(d);
  return v;
}

}  // namespace

TEST_CASE("docs/schema.md lists every per-step and evaluation series of the table as declared", "[series]") {
  check_section(step_series(), "Per-step series");
  check_section(eval_series(), "Evaluation series");
}

TEST_CASE("series table: names unique, accessors as the axes say", "[series]") {
  std::set<std::string> names;
  for (const auto* table : {&step_series(), &eval_series()})
    for (const SeriesDef& s : *table) {
      INFO(s.name);
      CHECK(names.insert(s.name).second);
      const bool per_rank = s.axes == SeriesAxes::RankStep || s.axes == SeriesAxes::RankStepBucket ||
                            s.axes == SeriesAxes::RankStepGroup;
      // A derived series (rank 0 computes it from the gathered row) is per bucket and has no accessors.
      CHECK((s.derived == nullptr || s.axes == SeriesAxes::RankStepBucket));
      CHECK((s.get != nullptr) == (per_rank && !s.derived));
      CHECK((s.set != nullptr) == (per_rank && !s.derived));
      CHECK((s.step_value != nullptr) == (s.axes == SeriesAxes::Step));
      CHECK((s.eval_value != nullptr) == (s.axes == SeriesAxes::Eval));
      CHECK((s.progress != nullptr) == (s.progress_pos > 0));
    }
  CHECK(step_series().size() == 29);
  CHECK(eval_series().size() == 5);
}

TEST_CASE("StepRow: the gathered row's layout, in seconds, and its inverse", "[series]") {
  const size_t nb = 3;
  const StepRecord r = sample_record(nb);
  const StepRow row(nb);
  REQUIRE(row.size() == 12 + 12 * nb);
  const std::vector<double> v = row.pack(r);
  REQUIRE(v.size() == row.size());
  // The row of the trainer before the table: 11 float series, the non-finite flag, then the
  // per-bucket arrays start, end, bytes, compressed, compress, all-reduce, copy; then those of
  // --shard-optimizer: reduce-scattered, all-gather start, end, time and bytes.
  const std::vector<double> scalars = {r.data_wait_ms / 1e3, r.input_wait_ms / 1e3, r.forward_ms / 1e3,
                                       r.backward_ms / 1e3,  r.exposed_comm_ms / 1e3, r.optimizer_ms / 1e3,
                                       r.step_ms / 1e3,      r.wall_ms / 1e3,         r.loss,
                                       r.start_ms / 1e3,     r.backward_end_ms / 1e3, 1.0};
  for (size_t i = 0; i < scalars.size(); ++i) CHECK(v[i] == scalars[i]);
  for (size_t b = 0; b < nb; ++b) {
    CHECK(v[12 + 0 * nb + b] == r.buckets.start_ms[b] * 1e-3);
    CHECK(v[12 + 1 * nb + b] == r.buckets.end_ms[b] * 1e-3);
    CHECK(v[12 + 2 * nb + b] == (double)r.buckets.bytes_sent[b]);
    CHECK(v[12 + 3 * nb + b] == (double)r.buckets.compressed[b]);
    CHECK(v[12 + 4 * nb + b] == r.buckets.compress_ms[b] * 1e-3);
    CHECK(v[12 + 5 * nb + b] == r.buckets.allreduce_ms[b] * 1e-3);
    CHECK(v[12 + 6 * nb + b] == r.buckets.copy_ms[b] * 1e-3);
    CHECK(v[12 + 7 * nb + b] == (double)r.buckets.reduce_scattered[b]);
    CHECK(v[12 + 8 * nb + b] == r.buckets.allgather_start_ms[b] * 1e-3);
    CHECK(v[12 + 9 * nb + b] == r.buckets.allgather_end_ms[b] * 1e-3);
    CHECK(v[12 + 10 * nb + b] == r.buckets.allgather_ms[b] * 1e-3);
    CHECK(v[12 + 11 * nb + b] == (double)r.buckets.allgather_bytes[b]);
  }
  const StepRecord u = row.unpack(v.data());
  CHECK(u.forward_ms == Approx(r.forward_ms));
  CHECK(u.start_ms == Approx(r.start_ms));
  CHECK(u.backward_end_ms == Approx(r.backward_end_ms));
  CHECK(u.loss == r.loss);
  CHECK(u.nonfinite);
  REQUIRE(u.buckets.start_ms.size() == nb);
  CHECK(u.buckets.end_ms[2] == Approx(r.buckets.end_ms[2]));
  CHECK(u.buckets.bytes_sent[1] == r.buckets.bytes_sent[1]);
  CHECK(u.buckets.compressed[1] == 1);
  // A record with fewer buckets than the run has: zeros for the missing ones.
  const std::vector<double> short_row = row.pack(sample_record(1));
  CHECK(short_row[12 + 1] == 0.0);
  CHECK(short_row[12 + 2 * nb + 2] == 0.0);
}

TEST_CASE("StepRow with gradient-ready groups: their values after every other series, in seconds", "[series]") {
  const size_t nb = 3, ng = 4;
  StepRecord r = sample_record(nb);
  r.grad_ready_ms = {11.0, 12.5, 20.25, 30.0};
  const StepRow row(nb, ng), plain(nb);
  REQUIRE(plain.size() == 12 + 12 * nb);  // without groups: the row of before
  REQUIRE(row.size() == 12 + 12 * nb + ng);
  CHECK(row.offset("grad_ready/ready_time") == 12 + 12 * nb);
  CHECK(row.offset("buckets/copy_time") == plain.offset("buckets/copy_time"));
  const std::vector<double> v = row.pack(r);
  REQUIRE(v.size() == row.size());
  const std::vector<double> w = plain.pack(r);
  CHECK(std::vector<double>(v.begin(), v.begin() + (long)w.size()) == w);
  for (size_t g = 0; g < ng; ++g) CHECK(v[12 + 12 * nb + g] == r.grad_ready_ms[g] * 1e-3);
  const StepRecord u = row.unpack(v.data());
  REQUIRE(u.grad_ready_ms.size() == ng);
  for (size_t g = 0; g < ng; ++g) CHECK(u.grad_ready_ms[g] == Approx(r.grad_ready_ms[g]));
  CHECK(plain.unpack(w.data()).grad_ready_ms.empty());
  // A record without times (a step that recorded none): zeros.
  StepRecord none = sample_record(nb);
  const std::vector<double> z = row.pack(none);
  for (size_t g = 0; g < ng; ++g) CHECK(z[12 + 12 * nb + g] == 0.0);
  // The busbw of a step does not depend on the groups behind the bucket values.
  std::vector<double> two = v, two_plain = w;
  two.insert(two.end(), v.begin(), v.end());
  two_plain.insert(two_plain.end(), w.begin(), w.end());
  CHECK(step_busbw_gbps(two.data(), 2, nb, ng) == step_busbw_gbps(two_plain.data(), 2, nb));
}

TEST_CASE("append_step_series writes every rank's row into the right dataset and dtype", "[series]") {
  vitddp_test::TempDir dir("vitddp_series_");
  const std::string path = (dir.path / "s.h5").string();
  const size_t nb = 2;
  const StepRow row(nb);
  StepRecord r0 = sample_record(nb), r1 = sample_record(nb);
  r1.forward_ms = 99.0;
  r1.nonfinite = false;
  r1.buckets.bytes_sent[1] = 123456789012ull;
  std::vector<double> rows = row.pack(r0);
  const std::vector<double> p1 = row.pack(r1);
  rows.insert(rows.end(), p1.begin(), p1.end());
  {
    ResultsFile f = ResultsFile::create(path, false);
    create_step_series(f, 2, (int64_t)nb);
    append_step_series(f, rows.data(), 2, nb, StepContext{0, true, 0.01});
    append_step_series(f, rows.data(), 2, nb, StepContext{1, false, 0.02});
    f.close();
  }
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  // [ranks, steps]: rank 0's two steps, then rank 1's.
  CHECK(read_f64(file, "timing/forward") == std::vector<double>{r0.forward_ms / 1e3, r0.forward_ms / 1e3, 0.099, 0.099});
  CHECK(read_i64(file, "training/nonfinite") == std::vector<int64_t>{1, 1, 0, 0});
  // [ranks, steps, buckets]
  CHECK(read_i64(file, "buckets/bytes_sent") ==
        std::vector<int64_t>{4096, 8192, 4096, 8192, 4096, 123456789012, 4096, 123456789012});
  CHECK(read_f64(file, "buckets/allreduce_end")[3] == r0.buckets.end_ms[1] * 1e-3);
  // buckets/busbw, derived: bytes_sent / allreduce_time / 1e9 x 2(n-1)/n, n = 2 (factor 1); bucket
  // 1 of the sample is reduce-scattered: x (n-1)/n (factor 1/2).
  const std::vector<double> busbw = read_f64(file, "buckets/busbw");
  REQUIRE(busbw.size() == 8);
  CHECK(busbw[0] == Approx(4096.0 / 1.25e-3 / 1e9).epsilon(1e-12));
  CHECK(busbw[1] == Approx(0.5 * 8192.0 / 2.25e-3 / 1e9).epsilon(1e-12));
  CHECK(busbw[3] == Approx(0.5 * 8192.0 / 2.25e-3 / 1e9).epsilon(1e-12));             // rank 0, step 1
  CHECK(busbw[5] == Approx(0.5 * 123456789012.0 / 2.25e-3 / 1e9).epsilon(1e-12));     // rank 1's own bytes
  CHECK(read_i64(file, "buckets/reduce_scattered") == std::vector<int64_t>{0, 1, 0, 1, 0, 1, 0, 1});
  // buckets/allgather_busbw: allgather_bytes / allgather_time / 1e9 x (n-1)/n.
  const std::vector<double> agbw = read_f64(file, "buckets/allgather_busbw");
  REQUIRE(agbw.size() == 8);
  CHECK(agbw[0] == Approx(0.5 * 4096.0 / 0.5e-3 / 1e9).epsilon(1e-12));
  CHECK(agbw[1] == Approx(0.5 * 8192.0 / 1.5e-3 / 1e9).epsilon(1e-12));
  CHECK(read_i64(file, "buckets/allgather_bytes") == std::vector<int64_t>{4096, 8192, 4096, 8192, 4096, 8192, 4096, 8192});
  CHECK(read_f64(file, "buckets/allgather_end")[1] == r0.buckets.allgather_end_ms[1] * 1e-3);
  // [1, steps]
  CHECK(read_i64(file, "steps/timed") == std::vector<int64_t>{1, 0});
  CHECK(read_f64(file, "training/lr") == std::vector<double>{0.01, 0.02});
  H5Fclose(file);
}

TEST_CASE("append_step_series: grad_ready/ready_time [ranks, steps, groups] only when groups are recorded",
          "[series]") {
  vitddp_test::TempDir dir("vitddp_series_groups_");
  const size_t nb = 2, ng = 3;
  for (const size_t groups : {ng, size_t(0)}) {
    INFO("groups " << groups);
    const std::string path = (dir.path / ("g" + std::to_string(groups) + ".h5")).string();
    const StepRow row(nb, groups);
    StepRecord r0 = sample_record(nb), r1 = sample_record(nb);
    r0.grad_ready_ms = {11.0, 12.0, 13.0};
    r1.grad_ready_ms = {21.0, 22.0, 23.5};
    std::vector<double> rows = row.pack(r0);
    const std::vector<double> p1 = row.pack(r1);
    rows.insert(rows.end(), p1.begin(), p1.end());
    {
      ResultsFile f = ResultsFile::create(path, false);
      create_step_series(f, 2, (int64_t)nb, (int64_t)groups);
      append_step_series(f, rows.data(), 2, nb, StepContext{0, true, 0.01}, groups);
      append_step_series(f, rows.data(), 2, nb, StepContext{1, true, 0.01}, groups);
      f.close();
    }
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(file >= 0);
    CHECK(read_f64(file, "buckets/allreduce_end")[3] == r0.buckets.end_ms[1] * 1e-3);  // unchanged by the groups
    CHECK(read_f64(file, "timing/forward")[2] == r1.forward_ms / 1e3);
    if (groups == 0) {
      CHECK(H5Lexists(file, "grad_ready", H5P_DEFAULT) == 0);
    } else {
      // [ranks, steps, groups]: rank 0's two steps, then rank 1's (milliseconds x 1e-3, as packed).
      std::vector<double> want;
      for (const StepRecord* r : {&r0, &r1})
        for (int step = 0; step < 2; ++step)
          for (double ms : r->grad_ready_ms) want.push_back(ms * 1e-3);
      CHECK(read_f64(file, "grad_ready/ready_time") == want);
      CHECK(want[8] == Approx(0.0235));
      hid_t d = H5Dopen2(file, "grad_ready/ready_time", H5P_DEFAULT);
      REQUIRE(d >= 0);
      hid_t sp = H5Dget_space(d);
      hsize_t dims[3] = {0, 0, 0};
      REQUIRE(H5Sget_simple_extent_ndims(sp) == 3);
      H5Sget_simple_extent_dims(sp, dims, nullptr);
      CHECK((dims[0] == 2 && dims[1] == 2 && dims[2] == ng));
      hid_t a = H5Aopen(d, "axes", H5P_DEFAULT);
      hid_t t = H5Aget_type(a);
      char* axes = nullptr;
      REQUIRE(H5Aread(a, t, &axes) >= 0);
      CHECK(std::string(axes) == "rank,step,group");
      H5free_memory(axes);
      H5Tclose(t);
      H5Aclose(a);
      H5Sclose(sp);
      H5Dclose(d);
    }
    H5Fclose(file);
  }
}

TEST_CASE("progress_line: the text of rank 0's progress line, steps numbered from 0", "[series]") {
  const StepRecord r = sample_record(1);
  Progress p;
  p.done = 3;
  p.elapsed_s = 1.25;
  p.eta_s = 4.5;
  p.steps_per_s = 2.4;
  p.images_per_s = 76.8;
  char expected[512];
  std::snprintf(expected, sizeof(expected),
                "[vitddp] step %d (%d/%d done, %s) elapsed %.1f s, ETA %.1f s, %.2f steps/s, %.1f images/s, loss %.4f, "
                "lr %.3g | step %.1f ms: fwd %.1f, bwd %.1f, exposed comm %.1f, opt %.1f, data wait %.1f",
                2, 3, 14, "timed", 1.25, 4.5, 2.4, 76.8, r.loss, 0.001, r.step_ms, r.forward_ms, r.backward_ms,
                r.exposed_comm_ms, r.optimizer_ms, r.data_wait_ms);
  CHECK(progress_line(r, StepContext{2, true, 0.001}, 14, "timed", p) == expected);
  CHECK(progress_line(r, StepContext{2, true, 0.001}, 14, "timed", p) ==
        "[vitddp] step 2 (3/14 done, timed) elapsed 1.2 s, ETA 4.5 s, 2.40 steps/s, 76.8 images/s, loss 2.3026, lr "
        "0.001 | step 36.6 ms: fwd 10.1, bwd 20.5, exposed comm 3.8, opt 2.0, data wait 1.5");
}

TEST_CASE("format_duration: seconds, minutes, hours", "[series]") {
  CHECK(format_duration(0) == "0.0 s");
  CHECK(format_duration(59.94) == "59.9 s");
  CHECK(format_duration(245) == "4m05s");
  CHECK(format_duration(3723.4) == "1h02m03s");
  CHECK(format_duration(-1) == "0.0 s");
}

TEST_CASE("bus bandwidth: nccl-tests' all-reduce definitions, per bucket and per step", "[series]") {
  // busbw = bytes / s / 1e9 x 2(n-1)/n: 1 GB in 1 s on 4 ranks is 1.5 GB/s; one rank has no bus.
  CHECK(allreduce_busbw_gbps(1e9, 1.0, 4) == Approx(1.5));
  CHECK(allreduce_busbw_gbps(1e9, 1.0, 2) == Approx(1.0));
  CHECK(allreduce_busbw_gbps(1e9, 1.0, 1) == 0.0);
  CHECK(allreduce_busbw_gbps(1e9, 0.0, 2) == 0.0);
  // Reduce-scatter and all-gather: x (n-1)/n (nccl-tests' reduce_scatter_perf, all_gather_perf).
  CHECK(busbw_gbps(Collective::ReduceScatter, 1e9, 1.0, 4) == Approx(0.75));
  CHECK(busbw_gbps(Collective::AllGather, 1e9, 0.5, 8) == Approx(1.75));
  CHECK(busbw_gbps(Collective::AllGather, 1e9, 0.5, 1) == 0.0);
  CHECK(bus_factor(Collective::AllReduce, 8) == Approx(1.75));
  // A step on 2 ranks, 2 buckets: rank 0 sends 4096 and 8192 bytes; the all-reduce times are
  // (1.25 ms, 2.25 ms) on rank 0 and (3.25 ms, 0.25 ms) on rank 1: means 2.25 ms and 1.25 ms.
  const size_t nb = 2;
  const StepRow row(nb);
  StepRecord r0 = sample_record(nb), r1 = sample_record(nb);
  r1.buckets.allreduce_ms = {3.25, 0.25};
  r1.buckets.bytes_sent = {1, 1};  // rank 0's bytes count, as the Python reader takes them
  std::vector<double> rows = row.pack(r0);
  const std::vector<double> p1 = row.pack(r1);
  rows.insert(rows.end(), p1.begin(), p1.end());
  for (StepRecord* r : {&r0, &r1}) r->buckets.reduce_scattered = {0, 0};  // all-reduces
  rows = row.pack(r0);
  const std::vector<double> p1b = row.pack(r1);
  rows.insert(rows.end(), p1b.begin(), p1b.end());
  CHECK(step_busbw_gbps(rows.data(), 2, nb) == Approx((4096.0 + 8192.0) / (2.25e-3 + 1.25e-3) / 1e9));
  // The same step's buckets reduce-scattered (rank 0's flag): half the factor on 2 ranks.
  r0.buckets.reduce_scattered = {1, 1};
  rows = row.pack(r0);
  rows.insert(rows.end(), p1b.begin(), p1b.end());
  CHECK(step_busbw_gbps(rows.data(), 2, nb) == Approx(0.5 * (4096.0 + 8192.0) / (2.25e-3 + 1.25e-3) / 1e9));
  r0.buckets.reduce_scattered = {0, 0};
  // A bucket without recorded time on any rank is left out; none at all gives NaN.
  r0.buckets.allreduce_ms = {0.0, 2.0};
  r1.buckets.allreduce_ms = {0.0, 4.0};
  rows = row.pack(r0);
  const std::vector<double> q1 = row.pack(r1);
  rows.insert(rows.end(), q1.begin(), q1.end());
  CHECK(step_busbw_gbps(rows.data(), 2, nb) == Approx(8192.0 / 3e-3 / 1e9));
  r0.buckets.allreduce_ms = {0.0, 0.0};
  r1.buckets.allreduce_ms = {0.0, 0.0};
  rows = row.pack(r0);
  const std::vector<double> z1 = row.pack(r1);
  rows.insert(rows.end(), z1.begin(), z1.end());
  CHECK(std::isnan(step_busbw_gbps(rows.data(), 2, nb)));
}

TEST_CASE("TimedWindow: step time spread as numpy computes it", "[series]") {
  auto spread_of = [](const std::vector<double>& ms) {
    TimedWindow w(0, (int)ms.size(), 0);
    StepRecord r;
    for (size_t i = 0; i < ms.size(); ++i) {
      w.before_step((int)i);
      r.step_ms = ms[i];
      w.after_step((int)i, r);
    }
    return w.step_time_spread();
  };
  // numpy: np.percentile([4, 7, 1], 90) = 6.4; np.std([4, 7, 1]) / np.mean(...) = sqrt(6) / 4
  const TimedWindow::Spread a = spread_of({4.0, 7.0, 1.0});
  CHECK(a.min == 1.0);
  CHECK(a.median == 4.0);
  CHECK(a.p90 == Approx(6.4));
  CHECK(a.max == 7.0);
  CHECK(a.cv == Approx(0.6123724356957945));
  // np.percentile([1, 2, 3, 4], 90) = 3.7; np.std / np.mean = sqrt(1.25) / 2.5
  const TimedWindow::Spread b = spread_of({2.0, 4.0, 1.0, 3.0});
  CHECK(b.p90 == Approx(3.7));
  CHECK(b.median == 3.0);  // the upper median, as summary/median_step_time
  CHECK(b.cv == Approx(0.4472135954999579));
  const TimedWindow::Spread one = spread_of({5.0});
  CHECK(one.p90 == 5.0);
  CHECK(one.cv == 0.0);
  CHECK(spread_of({}).max == 0.0);
}

TEST_CASE("TimedWindow: phases, the resumed part of the window, excluded pauses, bucket counts", "[series]") {
  TimedWindow w(10, 3, 0);  // the article's window: steps 10, 11, 12 timed
  CHECK(std::string(w.phase(9)) == "warm-up");
  CHECK(std::string(w.phase(10)) == "timed");
  CHECK(std::string(w.phase(12)) == "timed");
  CHECK(std::string(w.phase(13)) == "cool-down");
  CHECK(!w.is_timed(9));
  CHECK(w.is_timed(12));
  CHECK(w.count() == 3);
  CHECK(!w.complete(12));
  CHECK(w.complete(13));
  CHECK(TimedWindow(10, 3, 11).count() == 2);  // resumed inside the window
  CHECK(TimedWindow(10, 3, 13).count() == 0);  // resumed past it
  CHECK(!TimedWindow(10, 3, 13).complete(14));

  std::vector<bool> profiler;
  TimedWindow v(1, 3, 0, [&](bool on) { profiler.push_back(on); });  // steps 1, 2, 3 timed
  StepRecord r = sample_record(2);  // bucket starts 5, 6 ms; backward ends at 30.875 ms
  r.buckets.start_ms[1] = 31.0;     // this one started after backward compute: late
  const std::vector<double> step_ms = {9.0, 4.0, 7.0, 1.0, 8.0};
  for (int i = 0; i < 5; ++i) {
    v.before_step(i);
    CHECK(profiler.size() == (i == 0 ? 0u : i <= 3 ? 1u : 2u));
    r.step_ms = step_ms[(size_t)i];
    v.after_step(i, r);
    CHECK(profiler.size() == (i >= 3 ? 2u : i >= 1 ? 1u : 0u));
    if (i == 1) v.exclude(i, 1e6);  // a pause inside the window: taken out
    if (i == 3) v.exclude(i, 1e6);  // after the last timed step: not inside
  }
  CHECK(profiler == std::vector<bool>{true, false});
  CHECK(v.median_step_ms() == 4.0);  // of 4, 7, 1: not the warm-up 9 nor the cool-down 8
  CHECK(v.buckets() == 6);
  CHECK(v.late_buckets() == 3);
  CHECK(v.seconds() < 0);  // elapsed (well under 1e6 s) minus the one excluded pause
  CHECK(v.seconds() > -1e6);
}
