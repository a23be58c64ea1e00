#include "ps/online_scrub.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "spdlog/spdlog.h"

namespace ecps {

absl::Status StripeSource::WriteRows(int, const v1::WriteRowsRequest&) {
  return absl::UnimplementedError("this stripe source writes no data rows");
}
absl::Status StripeSource::DenseChecksums(int, const v1::DenseChecksumsRequest&,
                                          v1::DenseChecksumsResponse*) {
  return absl::UnimplementedError("this stripe source reads no dense checksums");
}

StripeVerdict CheckStripe(const RowCode& code, const StripeMembers& members, size_t i,
                          std::vector<uint8_t>* scratch) {
  const int k = members.k, n = members.n;
  std::vector<uint32_t> agreed(k);
  if (!AgreedVersions(members, i, /*lost=*/-1, absl::MakeSpan(agreed))) {
    return StripeVerdict::kInFlight;
  }
  const size_t bytes = members.bytes;
  scratch->resize(bytes * (n - k));
  std::vector<const uint8_t*> data(k);
  std::vector<uint8_t*> parity(n - k);
  for (int j = 0; j < k; ++j) data[j] = members.payload(i, j);
  for (int q = 0; q < n - k; ++q) parity[q] = scratch->data() + q * bytes;
  if (!code.Encode(data, parity, bytes).ok()) return StripeVerdict::kMismatch;
  for (int q = 0; q < n - k; ++q) {
    if (std::memcmp(parity[q], members.payload(i, k + q), bytes) != 0) {
      return StripeVerdict::kMismatch;
    }
  }
  return StripeVerdict::kClean;
}

namespace {

// Whether `members` (n of `bytes`) are a codeword: parity == encode(data).
bool IsCodeword(const RowCode& code, absl::Span<const uint8_t* const> members, size_t bytes,
                std::vector<uint8_t>* scratch) {
  const int k = code.k(), r = code.r();
  scratch->resize(bytes * r);
  std::vector<uint8_t*> parity(r);
  for (int q = 0; q < r; ++q) parity[q] = scratch->data() + q * bytes;
  if (!code.Encode(members.subspan(0, k), parity, bytes).ok()) return false;
  for (int q = 0; q < r; ++q) {
    if (std::memcmp(parity[q], members[k + q], bytes) != 0) return false;
  }
  return true;
}

// What a scrub read asks of one server: the data rows and parity stripes, by table, and
// the slots (StripeMembers::slot) their answers go to.
struct ScrubWant {
  std::map<int, std::vector<int64_t>> data, parity;
  std::map<int, std::vector<size_t>> data_slots, parity_slots;
};

// The rows and stripes of `w` into `req` (whose header is filled already).
void FillScrubRequest(const ScrubWant& w, v1::ReadRowsRequest* req) {
  for (const auto& [t, rows] : w.data) {
    v1::TableRows* tr = req->add_tables();
    tr->set_table(t);
    tr->mutable_rows()->Add(rows.begin(), rows.end());
  }
  for (const auto& [t, ids] : w.parity) {
    v1::TableStripes* ts = req->add_parity();
    ts->set_table(t);
    ts->mutable_stripes()->Add(ids.begin(), ids.end());
  }
}

// Stores `server`'s answer `resp` to the request of `w` into `out` (members of `bytes`
// bytes, codes of k data and n members); INTERNAL when the answer is short.
absl::Status StoreScrubAnswer(int server, const ScrubWant& w, const v1::ReadRowsResponse& resp,
                              size_t bytes, int k, int n, StripeMembers* out) {
  const v1::ReadParityResponse& p = resp.parity();
  size_t e = 0;
  for (const auto& [t, slots] : w.data_slots) {
    for (size_t slot : slots) {
      if ((e + 1) * bytes > resp.payloads().size() || static_cast<int>(e) >= resp.versions_size()) {
        return absl::InternalError(
            absl::StrCat("scrub read from server ", server, ": a short answer"));
      }
      std::memcpy(out->payloads.data() + slot * bytes, resp.payloads().data() + e * bytes, bytes);
      out->have[slot] = 1;
      out->versions[slot * k + slot % n] = resp.versions(static_cast<int>(e));
      ++e;
    }
  }
  e = 0;
  for (const auto& [t, slots] : w.parity_slots) {
    for (size_t slot : slots) {
      if ((e + 1) * bytes > p.payloads().size() ||
          static_cast<int>((e + 1) * k) > p.versions_size() ||
          static_cast<int>(e) >= p.settled_size()) {
        return absl::InternalError(
            absl::StrCat("scrub parity read from server ", server, ": a short answer"));
      }
      std::memcpy(out->payloads.data() + slot * bytes, p.payloads().data() + e * bytes, bytes);
      out->have[slot] = 1;
      std::copy_n(p.versions().data() + e * k, k, out->versions.data() + slot * k);
      out->settled[slot] = p.settled(static_cast<int>(e)) ? 1 : 0;
      ++e;
    }
  }
  return absl::OkStatus();
}

}  // namespace

int LocateBadMember(const RowCode& code, absl::Span<const uint8_t* const> members, size_t bytes,
                    std::vector<uint8_t>* repaired) {
  const int k = code.k(), n = code.k() + code.r();
  std::vector<uint8_t> scratch;
  if (IsCodeword(code, members, bytes, &scratch)) return -1;
  if (code.r() < 2) return kUnlocatable;
  // Try each member as the bad one: decode it from k of the others and see whether the
  // stripe is then a codeword. The code's distance is r + 1 >= 3, so with one bad member
  // exactly one candidate passes; with more, none (or, past the distance, a wrong one: the
  // scrub assumes one flip per stripe between two passes).
  int found = kUnlocatable;
  std::vector<uint8_t> candidate(bytes);
  std::vector<const uint8_t*> trial(members.begin(), members.end());
  for (int m = 0; m < n; ++m) {
    std::vector<int> ids;
    std::vector<const uint8_t*> from;
    for (int o = 0; o < n && static_cast<int>(ids.size()) < k; ++o) {
      if (o == m) continue;
      ids.push_back(o);
      from.push_back(members[o]);
    }
    const int wanted[] = {m};
    uint8_t* out[] = {candidate.data()};
    if (!code.Decode(ids, from, wanted, out, bytes).ok()) continue;
    trial[m] = candidate.data();
    const bool fits = IsCodeword(code, trial, bytes, &scratch);
    trial[m] = members[m];
    if (!fits) continue;
    if (found != kUnlocatable) return kUnlocatable;  // two explanations: cannot tell
    found = m;
    *repaired = candidate;
  }
  return found;
}

ScrubPacer::Clock::time_point ScrubPacer::Account(Clock::time_point now, int64_t bytes) {
  const auto cost = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / rate_bytes_per_s_));
  next_ = std::max(next_, now) + cost;
  return next_;
}

OnlineScrub::OnlineScrub(OnlineScrubOptions options, const Placement& placement,
                         const RowCode* code, ParityStore* parity, DenseStore* dense,
                         StripeSource* peers)
    : options_(std::move(options)),
      placement_(placement),
      code_(code),
      parity_(parity),
      dense_(dense),
      peers_(peers),
      bytes_(parity->payload_bytes()),
      pacer_(options_.rate_mb_s) {}

OnlineScrub::~OnlineScrub() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void OnlineScrub::Start() {
  if (options_.interval_s <= 0) return;
  thread_ = std::thread([this] { Loop(); });
}

bool OnlineScrub::WaitUntil(Clock::time_point until) {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const auto now = Clock::now();
    if (now >= until) return true;
    stop_cv_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
  }
  return false;
}

void OnlineScrub::Loop() {
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.interval_s));
  // The first pass one interval in: a job starts from rows every server computed alike.
  Clock::time_point next = Clock::now() + interval;
  while (WaitUntil(next)) {
    const auto start = Clock::now();
    std::vector<TableStripe> stripes;
    parity_->ForEachStripe([&](int t, int64_t s) {
      auto q = parity_->ParityIndex(t, s);
      if (q.ok() && *q == 0) stripes.emplace_back(t, s);
    });
    absl::Status s;
    for (size_t b = 0; b < stripes.size() && s.ok(); b += options_.batch_stripes) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      const size_t e = std::min(stripes.size(), b + options_.batch_stripes);
      s = ScrubStripes(absl::MakeSpan(stripes).subspan(b, e - b), /*paced=*/true);
    }
    if (s.ok()) s = ScrubDense(/*paced=*/true);
    if (s.ok()) {
      Count([](ScrubCounts* c) { ++c->passes; });
    } else {
      // A peer down or being replaced: the recovery comes first; the next pass starts over.
      spdlog::info("server {}: online scrub pass abandoned: {}", options_.server, s.ToString());
    }
    next = std::max(start + interval, Clock::now());
  }
}

absl::Status OnlineScrub::RunPass() {
  std::vector<TableStripe> stripes;
  parity_->ForEachStripe([&](int t, int64_t s) {
    auto q = parity_->ParityIndex(t, s);
    if (q.ok() && *q == 0) stripes.emplace_back(t, s);
  });
  for (size_t b = 0; b < stripes.size(); b += options_.batch_stripes) {
    const size_t e = std::min(stripes.size(), b + options_.batch_stripes);
    if (absl::Status s = ScrubStripes(absl::MakeSpan(stripes).subspan(b, e - b), false); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ScrubDense(false); !s.ok()) return s;
  Count([](ScrubCounts* c) { ++c->passes; });
  return absl::OkStatus();
}

void OnlineScrub::Pace(int64_t bytes) { WaitUntil(pacer_.Account(Clock::now(), bytes)); }

void OnlineScrub::Count(const std::function<void(ScrubCounts*)>& fn) {
  absl::MutexLock lock(&mu_);
  fn(&counts_);
}

ScrubCounts OnlineScrub::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void OnlineScrub::FillStats(v1::ServerStats* stats) const {
  const ScrubCounts c = counts();
  stats->set_scrub_stripes_checked(c.stripes_checked);
  stats->set_scrub_bytes_checked(c.bytes_checked);
  stats->set_scrub_mismatches_found(c.found);
  stats->set_scrub_mismatches_confirmed(c.confirmed);
  stats->set_scrub_repaired(c.repaired);
  stats->set_scrub_unlocated(c.unlocated);
  stats->set_scrub_dense_checked(c.dense_checked);
  stats->set_scrub_passes(c.passes);
}

absl::Status OnlineScrub::ScrubStripes(absl::Span<const TableStripe> stripes, bool paced) {
  StripeMembers got;
  int64_t bytes = 0;
  if (absl::Status s = ReadMembers(stripes, &got, &bytes); !s.ok()) return s;
  std::vector<uint8_t> scratch;
  std::vector<TableStripe> in_flight, suspects;
  for (size_t i = 0; i < stripes.size(); ++i) {
    switch (CheckStripe(*code_, got, i, &scratch)) {
      case StripeVerdict::kClean:
        break;
      case StripeVerdict::kInFlight:
        in_flight.push_back(stripes[i]);
        break;
      case StripeVerdict::kMismatch:
        suspects.push_back(stripes[i]);
        break;
    }
  }
  // Caught mid-update: one more look without a freeze; most have settled by now.
  if (!in_flight.empty()) {
    int64_t more = 0;
    if (absl::Status s = ReadMembers(in_flight, &got, &more); !s.ok()) return s;
    bytes += more;
    for (size_t i = 0; i < in_flight.size(); ++i) {
      if (CheckStripe(*code_, got, i, &scratch) != StripeVerdict::kClean) {
        suspects.push_back(in_flight[i]);
      }
    }
  }
  Count([&](ScrubCounts* c) {
    c->stripes_checked += static_cast<int64_t>(stripes.size());
    c->bytes_checked += bytes;
  });
  if (!suspects.empty()) {
    if (absl::Status s = Confirm(suspects); !s.ok()) return s;
  }
  if (paced) Pace(bytes);
  return absl::OkStatus();
}

absl::Status OnlineScrub::ReadMembers(absl::Span<const TableStripe> stripes, StripeMembers* out,
                                      int64_t* bytes) {
  const int k = placement_.k(), n = placement_.n();
  out->Reset(stripes.size(), k, n, bytes_);
  std::map<int, ScrubWant> wants;  // by server
  for (size_t i = 0; i < stripes.size(); ++i) {
    const auto [t, stripe] = stripes[i];
    for (int m = 0; m < n; ++m) {
      const size_t slot = out->slot(i, m);
      if (m < k && stripe * k + m >= placement_.rows(t)) {
        out->have[slot] = 1;  // padding past the table's end: zero, never updated
        std::memset(out->payload(i, m), 0, bytes_);
        continue;
      }
      const int server = placement_.ServerOf(t, stripe, m);
      if (server == options_.server) {
        // Mine (the first parity member): read here.
        bool settled = true;
        absl::Status s =
            parity_->Read(t, stripe, out->payload(i, m), out->versions.data() + slot * k, &settled);
        if (!s.ok()) return s;
        out->have[slot] = 1;
        out->settled[slot] = settled ? 1 : 0;
        continue;
      }
      ScrubWant& w = wants[server];
      if (m < k) {
        w.data[t].push_back(stripe * k + m);
        w.data_slots[t].push_back(slot);
      } else {
        w.parity[t].push_back(stripe);
        w.parity_slots[t].push_back(slot);
      }
    }
  }
  std::vector<int> targets;
  std::vector<v1::ReadRowsRequest> requests;
  for (const auto& [server, w] : wants) {
    targets.push_back(server);
    v1::ReadRowsRequest& req = requests.emplace_back();
    options_.header(req.mutable_header());
    FillScrubRequest(w, &req);
  }
  std::vector<v1::ReadRowsResponse> responses;
  std::vector<absl::Status> statuses;
  peers_->ReadRowsFromEach(targets, requests, &responses, &statuses);
  for (size_t r = 0; r < targets.size(); ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(), absl::StrCat("scrub read from server ", targets[r],
                                                           ": ", statuses[r].message()));
    }
    if (absl::Status s =
            StoreScrubAnswer(targets[r], wants[targets[r]], responses[r], bytes_, k, n, out);
        !s.ok()) {
      return s;
    }
  }
  *bytes = static_cast<int64_t>(stripes.size()) * n * static_cast<int64_t>(bytes_);
  return absl::OkStatus();
}

absl::Status OnlineScrub::FreezeMembers(const std::vector<int>& servers,
                                        const std::vector<TableStripe>& stripes, uint64_t freeze_id,
                                        bool on) {
  v1::FreezeRequest freeze;
  freeze.set_freeze(on);
  freeze.set_freeze_id(freeze_id);
  freeze.set_owner(options_.instance);
  freeze.set_owner_server(options_.server);
  freeze.set_lease_ms(options_.lease_ms);
  std::map<int, v1::TableStripes*> by_table;
  for (const auto& [t, stripe] : stripes) {
    v1::TableStripes*& ts = by_table[t];
    if (ts == nullptr) {
      ts = freeze.add_stripes();
      ts->set_table(t);
    }
    ts->add_stripes(stripe);
  }
  absl::Status first;
  for (int server : servers) {
    options_.header(freeze.mutable_header());
    absl::Status s = peers_->Freeze(server, freeze);
    if (!s.ok() && first.ok()) {
      first = absl::Status(s.code(),
                           absl::StrCat("scrub freeze of server ", server, ": ", s.message()));
      if (on) break;  // the caller releases every server it asked
    }
  }
  return first;
}

absl::Status OnlineScrub::Confirm(absl::Span<const TableStripe> suspect_span) {
  const std::vector<TableStripe> suspects(suspect_span.begin(), suspect_span.end());
  Count([&](ScrubCounts* c) { c->found += static_cast<int64_t>(suspects.size()); });
  std::set<int> others;
  for (const auto& [t, stripe] : suspects) {
    for (int m = 0; m < placement_.n(); ++m) {
      const int server = placement_.ServerOf(t, stripe, m);
      if (server != options_.server) others.insert(server);
    }
  }
  const std::vector<int> servers(others.begin(), others.end());
  const uint64_t freeze_id =
      (uint64_t{1} << 63) | (static_cast<uint64_t>(options_.server) << 40) | ++freeze_count_;
  absl::Status result = FreezeMembers(servers, suspects, freeze_id, true);
  if (result.ok()) {
    StripeMembers got;
    int64_t bytes = 0;
    result = ReadMembers(suspects, &got, &bytes);
    std::vector<uint8_t> scratch;
    for (size_t i = 0; result.ok() && i < suspects.size(); ++i) {
      if (CheckStripe(*code_, got, i, &scratch) == StripeVerdict::kClean) continue;
      Count([](ScrubCounts* c) { ++c->confirmed; });
      result = Repair(suspects[i], got, i, freeze_id);
    }
  }
  absl::Status released = FreezeMembers(servers, suspects, freeze_id, false);
  return result.ok() ? released : result;
}

absl::Status OnlineScrub::Repair(const TableStripe& ts, const StripeMembers& got, size_t i,
                                 uint64_t freeze_id) {
  const auto [t, stripe] = ts;
  const int k = placement_.k(), n = placement_.n();
  // Frozen, the data rows' own versions are the truth: every parity row must contain exactly
  // those updates.
  std::vector<uint32_t> versions(k);
  for (int j = 0; j < k; ++j) versions[j] = got.says(i, j, j);
  std::vector<const uint8_t*> members(n);
  for (int m = 0; m < n; ++m) members[m] = got.payload(i, m);
  std::vector<uint8_t> fixed;
  int bad = LocateBadMember(*code_, members, bytes_, &fixed);
  bool unlocated = false;
  if (bad == kUnlocatable) {
    // r = 1 (or more than one member bad): re-derive the parity from the data rows.
    unlocated = true;
    bad = -1;
    spdlog::error(
        "server {}: online scrub: table {} stripe {} disagrees with its parity and the "
        "code cannot say which member is wrong; parity re-derived from the data rows",
        options_.server, t, stripe);
  } else if (bad >= 0) {
    spdlog::warn(
        "server {}: online scrub: table {} stripe {} member {} ({} on server {}) was "
        "corrupt; rewritten",
        options_.server, t, stripe, bad, bad < k ? "data row" : "parity row",
        placement_.ServerOf(t, stripe, bad));
  }
  std::vector<uint8_t> rebuilt;
  if (bad >= 0 && bad < k) {
    const int64_t row = stripe * k + bad;
    v1::WriteRowsRequest req;
    options_.header(req.mutable_header());
    req.set_table(t);
    req.add_rows(row);
    req.set_payloads(fixed.data(), fixed.size());
    req.add_versions(versions[bad]);
    req.set_freeze_id(freeze_id);
    req.set_owner(options_.instance);
    const int server = placement_.ServerOf(t, stripe, bad);
    if (absl::Status s = peers_->WriteRows(server, req); !s.ok()) return s;
    members[bad] = fixed.data();
  }
  // Every parity member that differs from the encode of the (repaired) data rows, or whose
  // versions are not the data's, is rewritten.
  std::vector<uint8_t> parity(bytes_ * (n - k));
  std::vector<uint8_t*> out(n - k);
  for (int q = 0; q < n - k; ++q) out[q] = parity.data() + q * bytes_;
  if (absl::Status s = code_->Encode(absl::MakeSpan(members).subspan(0, k), out, bytes_); !s.ok()) {
    return s;
  }
  for (int q = 0; q < n - k; ++q) {
    bool same = std::memcmp(out[q], got.payload(i, k + q), bytes_) == 0;
    for (int j = 0; j < k; ++j) same &= got.says(i, k + q, j) == versions[j];
    if (same) continue;
    if (absl::Status s = WriteParityMember(ts, q, out[q], versions.data(), freeze_id); !s.ok()) {
      return s;
    }
  }
  Count([&](ScrubCounts* c) { ++(unlocated ? c->unlocated : c->repaired); });
  return absl::OkStatus();
}

absl::Status OnlineScrub::WriteParityMember(const TableStripe& ts, int q, const uint8_t* payload,
                                            const uint32_t* versions, uint64_t freeze_id) {
  const auto [t, stripe] = ts;
  const int k = placement_.k();
  const int server = placement_.ServerOf(t, stripe, k + q);
  if (server == options_.server) return parity_->Overwrite(t, stripe, payload, versions);
  v1::WriteParityRequest req;
  options_.header(req.mutable_header());
  req.set_table(t);
  req.add_stripes(stripe);
  req.set_payloads(payload, bytes_);
  req.mutable_versions()->Add(versions, versions + k);
  req.set_freeze_id(freeze_id);
  req.set_owner(options_.instance);
  return peers_->WriteParity(server, req);
}

absl::Status OnlineScrub::ScrubDense(bool paced) {
  // The replicas held here, by primary.
  std::map<int, std::vector<int>> by_primary;
  for (int t = 0; t < dense_->num_tensors(); ++t) {
    if (dense_->Holds(t) && !dense_->Owns(t)) by_primary[dense_->PrimaryOf(t)].push_back(t);
  }
  for (const auto& entry : by_primary) {
    // Named, not structured bindings: the lambda below captures them (C++17).
    const int primary = entry.first;
    const std::vector<int>& tensors = entry.second;
    // A tensor differs when, at the same version, the checksums do; versions that moved
    // between the two reads say nothing (the next pass looks again).
    auto differing = [&](std::vector<std::pair<int, int64_t>>* out) -> absl::Status {
      out->clear();
      v1::DenseChecksumsRequest req;
      options_.header(req.mutable_header());
      v1::DenseChecksumsResponse resp;
      if (absl::Status s = peers_->DenseChecksums(primary, req, &resp); !s.ok()) return s;
      for (const v1::DenseChecksum& c : resp.tensors()) {
        if (!c.primary() ||
            std::find(tensors.begin(), tensors.end(), c.tensor()) == tensors.end()) {
          continue;
        }
        uint64_t sum = 0;
        int64_t version = 0;
        if (absl::Status s = dense_->Checksum(c.tensor(), &sum, &version); !s.ok()) return s;
        if (version == c.version() && sum != c.checksum()) {
          out->emplace_back(c.tensor(), version);
        }
      }
      return absl::OkStatus();
    };
    std::vector<std::pair<int, int64_t>> found, again;
    if (absl::Status s = differing(&found); !s.ok()) return s;
    // Both checksums read every byte of the tensors (weights and state) once.
    int64_t bytes = 0;
    for (int t : tensors) bytes += 2 * sizeof(float) * dense_->Size(t);
    Count([&](ScrubCounts* c) {
      c->dense_checked += static_cast<int64_t>(tensors.size());
      c->bytes_checked += bytes;
      c->found += static_cast<int64_t>(found.size());
    });
    if (!found.empty()) {
      if (absl::Status s = differing(&again); !s.ok()) return s;
      for (const auto& [tensor, version] : again) {
        if (std::find(found.begin(), found.end(), std::make_pair(tensor, version)) == found.end()) {
          continue;  // not the same version twice: maybe an update in between
        }
        v1::ReadDenseRequest req;
        options_.header(req.mutable_header());
        req.set_tensor(tensor);
        v1::ReadDenseResponse copy;
        if (absl::Status s = peers_->ReadDense(primary, req, &copy); !s.ok()) return s;
        // Either copy moved on (training updates the dense tensors every step): the next pass
        // looks again. Counted as confirmed only once it is acted on, so that one corruption
        // is one confirmed mismatch however many passes it takes to catch both copies still.
        if (copy.version() != version) continue;
        absl::Status s = dense_->RepairReplica(tensor, version, copy.weights(), copy.state());
        if (s.ok()) {
          spdlog::warn(
              "server {}: online scrub: dense replica of tensor {} differed from its "
              "primary on server {} at version {}; replaced by the primary's copy",
              options_.server, tensor, primary, version);
          Count([](ScrubCounts* c) {
            ++c->confirmed;
            ++c->repaired;
          });
        } else if (!absl::IsFailedPrecondition(s)) {
          return s;
        }
      }
    }
    if (paced) Pace(bytes);
  }
  return absl::OkStatus();
}

}  // namespace ecps
