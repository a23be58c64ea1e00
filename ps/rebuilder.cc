#include "ps/rebuilder.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

// How long the survivors honour one of the rebuild's freezes without its release.
constexpr uint32_t kFreezeLeaseMs = 30000;

}  // namespace

Rebuilder::Rebuilder(RebuildOptions options, const RowCode* code, EmbeddingStore* embeddings,
                     ParityStore* parity, DenseStore* dense, PeerClient* peers)
    : options_(std::move(options)),
      code_(code),
      embeddings_(embeddings),
      parity_(parity),
      dense_(dense),
      peers_(peers),
      placement_(embeddings->placement()),
      payload_bytes_(sizeof(float) * embeddings->payload_floats()),
      sender_("server-" + std::to_string(options_.server)),
      // A freeze sends one request to each server, and the background and on-demand batches
      // may freeze side by side.
      fanout_(std::min(2 * placement_.servers(), 64)) {
  rows_total_ = embeddings_->invalid_rows() + (parity_ != nullptr ? parity_->invalid_rows() : 0);
}

Rebuilder::~Rebuilder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  rebuilt_cv_.notify_all();
  queued_cv_.notify_all();
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (on_demand_thread_.joinable()) on_demand_thread_.join();
}

void Rebuilder::Start() {
  started_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { Loop(); });
  on_demand_thread_ = std::thread([this] { OnDemandLoop(); });
}

int Rebuilder::MyMember(int table, int64_t stripe) const {
  return placement_.MemberAt(table, stripe, options_.server);
}

bool Rebuilder::ItemValid(const Item& item) const {
  int m = MyMember(item.table, item.stripe);
  if (m < placement_.k()) {
    return embeddings_->IsValid(item.table, item.stripe * placement_.k() + m);
  }
  return parity_->IsValid(item.table, item.stripe);
}

std::vector<std::pair<int, int64_t>> Rebuilder::QueueMissing(
    absl::Span<const TableRowsRef> rows, bool urgent) {
  std::vector<std::pair<int, int64_t>> missing;
  if (embeddings_->all_valid()) return missing;
  const auto now = std::chrono::steady_clock::now();
  if (!urgent) {
    // The cadence of hints, whether or not they name lost rows.
    std::lock_guard<std::mutex> lock(mu_);
    const double ms = std::chrono::duration<double, std::milli>(now - last_hint_).count();
    if (last_hint_ != std::chrono::steady_clock::time_point{} && ms < 1000) {
      hint_interval_ms_ = hint_interval_ms_ == 0 ? ms : 0.8 * hint_interval_ms_ + 0.2 * ms;
    }
    last_hint_ = now;
  }
  std::vector<int64_t> table_missing;
  for (const TableRowsRef& t : rows) {
    table_missing.clear();
    embeddings_->MissingRows(t.table, t.rows, &table_missing);
    for (int64_t row : table_missing) missing.push_back({t.table, row});
  }
  if (missing.empty()) return missing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (on_demand_.empty()) first_hint_ = now;
    urgent_ |= urgent;
    for (const auto& [table, row] : missing) {
      on_demand_.push_back(Item{table, row / placement_.k()});
    }
  }
  queued_cv_.notify_one();
  return missing;
}

std::chrono::steady_clock::time_point Rebuilder::HintDeadlineLocked() const {
  // Hints come a step or more before their pulls (two steps from TrainingLoop): waiting a
  // little over one interval lets the next hint join the batch and still leaves most of a
  // step before the first hint's pull.
  const double linger_ms =
      std::min<double>(options_.max_hint_linger_ms, 1.25 * hint_interval_ms_);
  return first_hint_ + std::chrono::microseconds(static_cast<int64_t>(linger_ms * 1000));
}

void Rebuilder::Prefetch(absl::Span<const TableRowsRef> rows) { QueueMissing(rows, false); }

absl::Status Rebuilder::EnsureRows(absl::Span<const TableRowsRef> rows, int timeout_ms) {
  const std::vector<std::pair<int, int64_t>> missing = QueueMissing(rows, /*urgent=*/true);
  if (missing.empty()) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  size_t checked = 0;  // rows before this one are valid (rows never become invalid again)
  bool ok = rebuilt_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    if (stopping_ || !error_.ok()) return true;
    for (; checked < missing.size(); ++checked) {
      if (!embeddings_->IsValid(missing[checked].first, missing[checked].second)) return false;
    }
    return true;
  });
  if (!error_.ok()) return error_;
  if (!ok || stopping_) {
    return absl::DeadlineExceededError(absl::StrCat(missing.size(), " rows of ", rows.size(),
                                                    " tables not rebuilt within ", timeout_ms,
                                                    " ms"));
  }
  return absl::OkStatus();
}

absl::Status Rebuilder::EnsureDense(int timeout_ms) {
  if (dense_ready()) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  bool ok = rebuilt_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                         [&] { return stopping_ || !error_.ok() || dense_ready(); });
  if (!error_.ok()) return error_;
  if (!ok || stopping_) return absl::DeadlineExceededError("dense tensors not restored in time");
  return absl::OkStatus();
}

RebuildProgress Rebuilder::progress() const {
  RebuildProgress p;
  p.rows_done = rows_done_.load();
  p.rows_total = rows_total_;
  p.dense_ready = dense_ready();
  p.done = done();
  p.frozen_stripes = frozen_stripes_.load(std::memory_order_relaxed);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  p.rows_per_s = secs > 0 ? p.rows_done / secs : 0;
  std::lock_guard<std::mutex> lock(mu_);
  p.on_demand = on_demand_count_;
  p.on_demand_batches = static_cast<int64_t>(on_demand_ms_.size());
  return p;
}

absl::Status Rebuilder::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Rebuilder::LoadHotRows() {
  if (options_.hot_rows <= 0 || parity_ == nullptr) return;
  const std::set<int> unusable = options_.unusable ? options_.unusable() : std::set<int>{};
  absl::flat_hash_map<std::pair<int, int64_t>, uint32_t> heat;
  for (int peer : options_.live_peers ? options_.live_peers() : std::vector<int>{}) {
    if (unusable.count(peer) > 0) continue;
    v1::HotRowsRequest req;
    FillHeader(req.mutable_header(), options_.token, options_.epoch(), sender_);
    req.set_server(options_.server);
    req.set_max_rows(options_.hot_rows);
    v1::HotRowsResponse resp;
    // The order is only a hint: a holder that cannot answer leaves its rows to the sweep.
    if (!peers_->HotRows(peer, req, &resp).ok()) continue;
    for (int i = 0; i < resp.rows_size() && i < resp.tables_size() && i < resp.heat_size(); ++i) {
      heat[{resp.tables(i), resp.rows(i)}] += resp.heat(i);
    }
  }
  std::vector<std::pair<uint32_t, Item>> order;
  order.reserve(heat.size());
  for (const auto& [key, h] : heat) {
    const int table = key.first;
    const int64_t row = key.second;
    if (table < 0 || table >= placement_.num_tables() || row < 0 ||
        row >= placement_.rows(table) ||
        placement_.DataLocation(table, row).server != options_.server) {
      continue;
    }
    order.push_back({h, Item{table, row / placement_.k()}});
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && (a.second.table < b.second.table ||
                                                        (a.second.table == b.second.table &&
                                                         a.second.stripe < b.second.stripe)));
  });
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [h, item] : order) hot_.push_back(item);
  spdlog::info("server {}: rebuilding {} hot rows first", options_.server, hot_.size());
}

bool Rebuilder::Backoff(int* failures, const absl::Status& status) {
  ++*failures;
  if (*failures == 1 || *failures % 20 == 0) {
    spdlog::warn("server {}: rebuild batch failed ({} in a row): {}", options_.server, *failures,
                 status.ToString());
  }
  // Keep trying: a member that is unreachable now (a peer being replaced too, a transient
  // partition) may come back; requests waiting for rows time out on their own.
  std::unique_lock<std::mutex> lock(mu_);
  stop_cv_.wait_for(lock, std::chrono::milliseconds(50 * std::min(*failures, 20)),
               [&] { return stopping_; });
  return !stopping_;
}

void Rebuilder::OnDemandLoop() {
  int failures = 0;
  Members scratch;
  while (true) {
    std::vector<Item> items;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (true) {
        if (stopping_ || done()) return;
        if (on_demand_.empty()) {
          queued_cv_.wait(lock);
          continue;
        }
        // Rows a request waits for go at once; hinted rows only at their deadline.
        const auto deadline = HintDeadlineLocked();
        if (urgent_ || std::chrono::steady_clock::now() >= deadline) break;
        queued_cv_.wait_until(lock, deadline);
      }
      while (!on_demand_.empty() && static_cast<int>(items.size()) < options_.batch_stripes) {
        items.push_back(on_demand_.front());
        on_demand_.pop_front();
      }
      // What is left (a batch was full) goes next, at once: its first hint is old.
      if (on_demand_.empty()) urgent_ = false;
    }
    int64_t rebuilt = 0;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = RunBatch(items, /*restore_dense=*/false, &scratch, &rebuilt);
    {
      std::lock_guard<std::mutex> lock(mu_);
      on_demand_count_ += rebuilt;
      if (rebuilt > 0) {
        on_demand_ms_.push_back(std::chrono::duration<double, std::milli>(
                                    std::chrono::steady_clock::now() - t0)
                                    .count());
      }
    }
    // Even a failed batch may have installed rows. (The lock above was taken after the
    // installs, so no waiter checked before them and waits past this notify.)
    rebuilt_cv_.notify_all();
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        on_demand_.insert(on_demand_.begin(), items.begin(), items.end());
        urgent_ = true;  // requests may wait for them: retry once the backoff is over
      }
      if (!Backoff(&failures, s)) return;
      continue;
    }
    failures = 0;
  }
}

void Rebuilder::Loop() {
  LoadHotRows();
  int failures = 0;
  Members scratch;
  bool uncapped = false;
  while (true) {
    std::vector<Item> items;
    // Once training is over, nothing is left to protect from the rebuild.
    if (!uncapped && options_.rate_limit_mb_s > 0 && options_.training_done &&
        options_.training_done()) {
      uncapped = true;
      spdlog::info("server {}: every worker finished: rebuilding the rest at full speed",
                   options_.server);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      // The background sweep (when the rate limit allows): the rows updated most before the
      // failure, hottest first; then data slots of every table, then parity slots. Rows
      // workers ask for are rebuilt by OnDemandLoop meanwhile.
      const bool background = uncapped || std::chrono::steady_clock::now() >= background_allowed_at_;
      while (background && static_cast<int>(items.size()) < options_.batch_stripes &&
             !hot_.empty()) {
        const Item item = hot_.front();
        hot_.pop_front();
        if (!ItemValid(item)) items.push_back(item);
      }
      while (background && static_cast<int>(items.size()) < options_.batch_stripes &&
             cursor_table_ < placement_.num_tables()) {
        int t = static_cast<int>(cursor_table_);
        int64_t slots = cursor_parity_ ? placement_.ParitySlots(t) : placement_.DataSlots(t);
        if (cursor_slot_ >= slots) {
          cursor_slot_ = 0;
          if (!cursor_parity_ && parity_ != nullptr) {
            cursor_parity_ = true;
          } else {
            cursor_parity_ = false;
            ++cursor_table_;
          }
          continue;
        }
        int64_t slot = cursor_slot_++;
        if (!cursor_parity_) {
          int64_t row = placement_.RowAtDataSlot(t, options_.server, slot);
          if (row >= 0 && !embeddings_->IsValid(t, row)) items.push_back(Item{t, row / placement_.k()});
        } else {
          int q = 0;
          int64_t stripe = placement_.StripeAtParitySlot(t, options_.server, slot, &q);
          if (stripe >= 0 && !parity_->IsValid(t, stripe)) items.push_back(Item{t, stripe});
        }
      }
    }
    bool rows_left = !embeddings_->all_valid() || (parity_ != nullptr && !parity_->all_valid());
    if (items.empty() && !rows_left && dense_ready()) break;
    if (items.empty() && !uncapped && std::chrono::steady_clock::now() < background_allowed_at_) {
      // Rate-limited: wait for the budget (at most 100 ms at a time, to notice the end of
      // training).
      std::unique_lock<std::mutex> lock(mu_);
      stop_cv_.wait_until(lock,
                     std::min(background_allowed_at_,
                              std::chrono::steady_clock::now() + std::chrono::milliseconds(100)),
                     [&] { return stopping_; });
      continue;
    }
    if (items.empty() && rows_left) {
      // The sweep is over but rows remain (a failed batch): sweep again.
      std::lock_guard<std::mutex> lock(mu_);
      cursor_table_ = 0;
      cursor_slot_ = 0;
      cursor_parity_ = false;
    }
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = RunBatch(items, !dense_ready(), &scratch);
    {
      // A waiter checks its rows under mu_: taking it after the installs (even a failed
      // batch may have made some) means none checked before them and waits past this notify.
      std::lock_guard<std::mutex> lock(mu_);
    }
    rebuilt_cv_.notify_all();
    if (!s.ok()) {
      if (!Backoff(&failures, s)) return;
      continue;
    }
    failures = 0;
    if (options_.rate_limit_mb_s > 0 && !uncapped && !items.empty()) {
      // The next background batch waits until the background reads so far fit the rate
      // limit; rows workers ask for are never held back, and do not count.
      double mb = items.size() * payload_bytes_ * placement_.k() / 1e6;
      auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(mb / options_.rate_limit_mb_s));
      std::lock_guard<std::mutex> lock(mu_);
      background_allowed_at_ = std::max(background_allowed_at_, t0) + wait;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_.store(true, std::memory_order_release);
  }
  rebuilt_cv_.notify_all();
  queued_cv_.notify_all();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::vector<double> ms;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ms = on_demand_ms_;
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double q) {
    return ms.empty() ? 0.0 : ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  spdlog::info("server {}: rebuild complete: {} rows in {:.2f} s; {} on demand in {} batches "
               "(p50 {:.1f} ms, p90 {:.1f} ms); {} stripes read again mid-update, {} under a "
               "freeze",
               options_.server, rows_done_.load(), secs, progress().on_demand, ms.size(),
               pct(0.5), pct(0.9), reread_stripes_.load(), frozen_stripes_.load());
}

absl::Status Rebuilder::RunBatch(const std::vector<Item>& batch, bool restore_dense,
                                 Members* scratch, int64_t* rebuilt) {
  // Distinct stripes still missing (a row asked for by a hint, its pull and its push is
  // queued up to three times).
  std::vector<Item> items;
  items.reserve(batch.size());
  for (const Item& item : batch) {
    if (!ItemValid(item)) items.push_back(item);
  }
  auto key = [](const Item& a) { return std::make_pair(a.table, a.stripe); };
  std::sort(items.begin(), items.end(),
            [&](const Item& a, const Item& b) { return key(a) < key(b); });
  items.erase(std::unique(items.begin(), items.end(),
                          [&](const Item& a, const Item& b) { return key(a) == key(b); }),
              items.end());
  if (rebuilt != nullptr) *rebuilt = static_cast<int64_t>(items.size());
  // The dense restore needs every update paused, briefly: the tensors are copied under a
  // freeze of everything; the rows need none.
  if (restore_dense) {
    if (absl::Status s = RunFrozen({}, /*restore_dense=*/true); !s.ok()) return s;
  }
  // Rows whose members disagree were caught mid-update (a delta on its way): read them again
  // a little later (2 ms, then once a delta has surely arrived), and under a freeze of their
  // stripes if they keep changing.
  constexpr int kLockFreeReads = 3;
  for (int attempt = 0; attempt < kLockFreeReads && !items.empty(); ++attempt) {
    if (attempt > 0) {
      reread_stripes_.fetch_add(static_cast<int64_t>(items.size()), std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(attempt == 1 ? 2 : options_.settle_ms));
    }
    ReadMembers(items, scratch);
    std::vector<Item> retry;
    if (absl::Status s = Install(items, *scratch, /*frozen=*/false, &retry); !s.ok()) return s;
    items.swap(retry);
  }
  if (items.empty()) return absl::OkStatus();
  frozen_stripes_.fetch_add(static_cast<int64_t>(items.size()), std::memory_order_relaxed);
  return RunFrozen(items, /*restore_dense=*/false);
}

absl::Status Rebuilder::RunFrozen(const std::vector<Item>& items, bool restore_dense) {
  const std::vector<int> peers = options_.live_peers();
  const uint64_t epoch = options_.epoch();
  // Freeze only the stripes of these items (updates of other rows go on), except around the
  // dense restore.
  v1::FreezeRequest freeze;
  freeze.set_freeze_id((static_cast<uint64_t>(options_.server) << 48) | ++freeze_count_);
  // A lease the survivors drop if this process dies holding it (the map then says so), or
  // after kFreezeLeaseMs in any case: a frozen batch takes milliseconds.
  freeze.set_owner(options_.instance);
  freeze.set_owner_server(options_.server);
  freeze.set_lease_ms(kFreezeLeaseMs);
  if (!restore_dense) {
    std::map<int, v1::TableStripes*> by_table;
    for (const Item& item : items) {
      v1::TableStripes*& t = by_table[item.table];
      if (t == nullptr) {
        t = freeze.add_stripes();
        t->set_table(item.table);
      }
      t->add_stripes(item.stripe);
    }
  }
  auto freeze_all = [&](bool on) {
    std::vector<std::function<void()>> tasks;
    std::vector<absl::Status> statuses(peers.size());
    for (size_t i = 0; i < peers.size(); ++i) {
      tasks.push_back([&, i] {
        v1::FreezeRequest req = freeze;
        FillHeader(req.mutable_header(), options_.token, epoch, sender_);
        req.set_freeze(on);
        statuses[i] = peers_->Freeze(peers[i], req);
      });
    }
    fanout_.Run(std::move(tasks));
    for (size_t i = 0; i < peers.size(); ++i) {
      if (!statuses[i].ok()) {
        return absl::Status(statuses[i].code(), absl::StrCat("freeze of server ", peers[i], ": ",
                                                             statuses[i].message()));
      }
    }
    return absl::OkStatus();
  };
  absl::Status frozen = freeze_all(true);
  if (!frozen.ok()) {
    freeze_all(false).IgnoreError();
    return frozen;
  }
  if (options_.hold_freeze_ms > 0) {
    spdlog::warn("server {}: holding freeze {} for {} ms (ECPS_DRILL_HOLD_FREEZE_MS)",
                 options_.server, freeze.freeze_id(), options_.hold_freeze_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.hold_freeze_ms));
  }
  absl::Status result;
  if (!items.empty()) {
    Members members;
    ReadMembers(items, &members);
    result = Install(items, members, /*frozen=*/true, nullptr, freeze.freeze_id());
  }
  if (result.ok() && restore_dense) result = RestoreDense();
  absl::Status resumed = freeze_all(false);
  if (!result.ok()) return result;
  return resumed;
}

void Rebuilder::ReadMembers(const std::vector<Item>& items, Members* out) const {
  const int k = placement_.k(), n = placement_.n();
  const size_t bytes = payload_bytes_;
  const std::set<int> unusable = options_.unusable();
  const uint64_t epoch = options_.epoch();
  // Payloads are read only where `have` says so: the buffer is reused as it is.
  out->payloads.resize(items.size() * n * bytes);
  out->have.assign(items.size() * n, 0);
  out->settled.assign(items.size() * n, 1);
  out->versions.assign(items.size() * n * k, 0);
  // One request per server with its data and parity members of every table of the batch,
  // all servers at once. The lists are kept from batch to batch (cleared, not freed).
  const int servers = placement_.servers(), tables = placement_.num_tables();
  std::vector<uint8_t> readable(servers, 1);
  for (int s : unusable) {
    if (s >= 0 && s < servers) readable[s] = 0;
  }
  if (options_.server >= 0 && options_.server < servers) readable[options_.server] = 0;
  out->wants.resize(servers);
  for (ServerWants& ws : out->wants) {
    ws.data.resize(tables);
    ws.parity.resize(tables);
    for (Want& w : ws.data) w.clear();
    for (Want& w : ws.parity) w.clear();
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    const int mine = MyMember(item.table, item.stripe);
    for (int m = 0; m < n; ++m) {
      if (m == mine) continue;
      if (m < k && item.stripe * k + m >= placement_.rows(item.table)) {
        out->have[i * n + m] = 1;  // padding member past the table's end: zero, never updated
        std::memset(out->payloads.data() + (i * n + m) * bytes, 0, bytes);
        continue;
      }
      int server = placement_.ServerOf(item.table, item.stripe, m);
      if (!readable[server]) continue;
      ServerWants& ws = out->wants[server];
      Want& w = (m < k ? ws.data : ws.parity)[item.table];
      w.ids.push_back(m < k ? item.stripe * k + m : item.stripe);
      w.slots.push_back(i * n + m);
    }
  }
  auto count_of = [](const std::vector<Want>& by_table) {
    size_t count = 0;
    for (const Want& w : by_table) count += w.ids.size();
    return count;
  };
  // One request per server, all sent at once from this thread. A server that cannot answer
  // leaves its members unknown.
  std::vector<int> targets;
  std::vector<v1::ReadRowsRequest> requests;
  for (int server = 0; server < servers; ++server) {
    const ServerWants& ws = out->wants[server];
    if (count_of(ws.data) + count_of(ws.parity) == 0) continue;
    targets.push_back(server);
    v1::ReadRowsRequest& req = requests.emplace_back();
    FillHeader(req.mutable_header(), options_.token, epoch, sender_);
    for (int table = 0; table < tables; ++table) {
      const Want& w = ws.data[table];
      if (w.ids.empty()) continue;
      v1::TableRows* t = req.add_tables();
      t->set_table(table);
      t->mutable_rows()->Add(w.ids.begin(), w.ids.end());
    }
    for (int table = 0; table < tables; ++table) {
      const Want& w = ws.parity[table];
      if (w.ids.empty()) continue;
      v1::TableStripes* t = req.add_parity();
      t->set_table(table);
      t->mutable_stripes()->Add(w.ids.begin(), w.ids.end());
    }
    req.set_rebuilder(options_.server);
  }
  std::vector<v1::ReadRowsResponse> responses;
  std::vector<absl::Status> statuses;
  peers_->ReadRowsFromEach(targets, requests, &responses, &statuses);
  for (size_t r = 0; r < targets.size(); ++r) {
    if (!statuses[r].ok()) continue;
    const ServerWants& ws = out->wants[targets[r]];
    const size_t data = count_of(ws.data), parity = count_of(ws.parity);
    const v1::ReadRowsResponse& resp = responses[r];
    const v1::ReadParityResponse& p = resp.parity();
    if (resp.payloads().size() != data * bytes ||
        static_cast<size_t>(resp.versions_size()) != data ||
        p.payloads().size() != parity * bytes ||
        static_cast<size_t>(p.versions_size()) != parity * k ||
        static_cast<size_t>(p.settled_size()) != parity) {
      continue;
    }
    size_t e = 0;
    for (const Want& w : ws.data) {
      for (const size_t slot : w.slots) {
        std::memcpy(out->payloads.data() + slot * bytes, resp.payloads().data() + e * bytes,
                    bytes);
        out->have[slot] = 1;
        out->versions[slot * k + slot % n] = resp.versions(static_cast<int>(e));
        ++e;
      }
    }
    e = 0;
    for (const Want& w : ws.parity) {
      for (const size_t slot : w.slots) {
        std::memcpy(out->payloads.data() + slot * bytes, p.payloads().data() + e * bytes, bytes);
        out->have[slot] = 1;
        std::copy_n(p.versions().data() + e * k, k, out->versions.data() + slot * k);
        out->settled[slot] = p.settled(static_cast<int>(e)) ? 1 : 0;
        ++e;
      }
    }
  }
}

absl::Status Rebuilder::Install(const std::vector<Item>& items, const Members& mem, bool frozen,
                                std::vector<Item>* retry, uint64_t freeze_id) {
  const int k = placement_.k(), n = placement_.n(), r = placement_.r();
  const size_t bytes = payload_bytes_;
  const uint64_t epoch = options_.epoch();
  absl::Status result;
  std::vector<uint8_t> out(bytes);
  std::vector<uint32_t> agreed(k);
  std::vector<std::vector<uint8_t>> parity(r, std::vector<uint8_t>(bytes));
  std::map<std::pair<int, int>, v1::WriteParityRequest> fixes;  // (server, table)
  int64_t installed = 0;
  std::vector<int> ids;
  std::vector<const uint8_t*> ptrs;
  for (size_t i = 0; i < items.size() && result.ok(); ++i) {
    const Item& item = items[i];
    const int mine = MyMember(item.table, item.stripe);
    const uint8_t* have = mem.have.data() + i * n;
    auto member = [&](int m) { return mem.payloads.data() + (i * n + m) * bytes; };
    auto says = [&](int m, int j) { return mem.versions[(i * n + m) * k + j]; };
    // Member j's version: what the first member that knows it says (itself, or a parity);
    // the read is consistent when every member that knows it says the same.
    bool consistent = true;
    for (int j = 0; j < k; ++j) {
      bool known = j != mine && have[j] != 0;
      if (known) agreed[j] = says(j, j);
      for (int m = k; m < n; ++m) {
        if (m == mine || !have[m]) continue;
        consistent &= mem.settled[i * n + m] != 0;
        if (!known) {
          agreed[j] = says(m, j);
          known = true;
        } else if (says(m, j) != agreed[j]) {
          consistent = false;
        }
      }
      if (!known) agreed[j] = 0;
    }
    if (!consistent && !frozen) {
      retry->push_back(item);
      continue;
    }
    ids.clear();
    ptrs.clear();
    for (int m = 0; m < n; ++m) {
      if (have[m]) {
        ids.push_back(m);
        ptrs.push_back(member(m));
      }
    }
    if (static_cast<int>(ids.size()) < k) {
      result = absl::UnavailableError(absl::StrCat("stripe ", item.stripe, " of table ",
                                                   item.table, " has only ", ids.size(),
                                                   " reachable members, needs ", k));
      break;
    }
    int wanted = mine;
    uint8_t* out_ptr = out.data();
    result = code_->Decode(ids, ptrs, absl::MakeConstSpan(&wanted, 1),
                           absl::MakeSpan(&out_ptr, 1), bytes);
    if (!result.ok()) break;
    if (mine >= k) {
      const ParityStore::Install done = parity_->InstallRow(item.table, item.stripe, out.data(),
                                                             agreed.data());
      if (done == ParityStore::Install::kStale) {
        // A delta newer than the data read arrived (and was dropped) before the install.
        if (frozen) {
          result = absl::InternalError(absl::StrCat("parity of stripe ", item.stripe,
                                                    " of table ", item.table,
                                                    " saw a newer delta while frozen"));
          break;
        }
        retry->push_back(item);
        continue;
      }
      installed += done == ParityStore::Install::kInstalled ? 1 : 0;
      continue;
    }
    if (frozen && r > 1) {
      // Make the survivors' parity rows of this stripe agree with its data.
      bool all_data = true;
      std::vector<const uint8_t*> data(k);
      for (int j = 0; j < k; ++j) {
        all_data &= j == mine || have[j] != 0;
        data[j] = j == mine ? out.data() : member(j);
      }
      if (all_data) {
        std::vector<uint8_t*> pp;
        for (auto& p : parity) pp.push_back(p.data());
        result = code_->Encode(data, pp, bytes);
        if (!result.ok()) break;
        for (int q = 0; q < r; ++q) {
          bool same_versions = true;
          for (int j = 0; j < k; ++j) same_versions &= says(k + q, j) == agreed[j];
          if (!have[k + q] ||
              (same_versions && std::memcmp(parity[q].data(), member(k + q), bytes) == 0)) {
            continue;
          }
          int server = placement_.ServerOf(item.table, item.stripe, k + q);
          v1::WriteParityRequest& fix = fixes[{server, item.table}];
          fix.set_table(item.table);
          fix.add_stripes(item.stripe);
          fix.mutable_payloads()->append(reinterpret_cast<const char*>(parity[q].data()), bytes);
          for (int j = 0; j < k; ++j) fix.add_versions(agreed[j]);
        }
      }
    }
    // InstallRow copies the payload bytewise, so the decoded bytes can go as they are.
    if (embeddings_->InstallRow(item.table, item.stripe * k + mine,
                                reinterpret_cast<const float*>(out.data()), agreed[mine])) {
      ++installed;
    }
  }
  for (auto& [key, fix] : fixes) {
    if (!result.ok()) break;
    FillHeader(fix.mutable_header(), options_.token, epoch, sender_);
    fix.set_freeze_id(freeze_id);
    fix.set_owner(options_.instance);
    result = peers_->WriteParity(key.first, fix);
    if (result.ok()) {
      spdlog::info("server {}: made {} parity rows of table {} on server {} agree with their data",
                   options_.server, fix.stripes_size(), key.second, key.first);
    }
  }
  rows_done_.fetch_add(installed, std::memory_order_relaxed);
  return result;
}

absl::Status Rebuilder::RestoreDense() {
  const std::set<int> unusable = options_.unusable();
  for (int t = 0; t < dense_->num_tensors(); ++t) {
    if (!dense_->Holds(t)) continue;
    // Any other live holder: the primary when this server is a replica, else a replica.
    // Every live holder is read and the newest copy taken: a primary that died between its
    // replicas may have left one of them an update ahead of the other (the primary then
    // brings the other up to date, see ParameterServerCore::PushDense).
    std::vector<int> holders = dense_->ReplicasOf(t);
    holders.insert(holders.begin(), dense_->PrimaryOf(t));
    v1::ReadDenseResponse resp;
    bool found = false;
    for (int h : holders) {
      if (h == options_.server || unusable.count(h) > 0) continue;
      v1::ReadDenseRequest req;
      FillHeader(req.mutable_header(), options_.token, options_.epoch(), sender_);
      req.set_tensor(t);
      v1::ReadDenseResponse copy;
      if (absl::Status s = peers_->ReadDense(h, req, &copy); !s.ok()) return s;
      if (!found || copy.version() > resp.version()) resp = std::move(copy);
      found = true;
    }
    if (!found) {
      return absl::DataLossError(absl::StrCat("dense tensor ", t, " has no live copy to restore"));
    }
    std::vector<float> weights(resp.weights().size() / sizeof(float));
    std::vector<float> state(resp.state().size() / sizeof(float));
    std::memcpy(weights.data(), resp.weights().data(), resp.weights().size());
    std::memcpy(state.data(), resp.state().data(), resp.state().size());
    if (absl::Status s = dense_->Restore(t, weights, state, resp.version()); !s.ok()) return s;
  }
  // The sweep's batch that restored the tensors notifies EnsureDense when it returns.
  dense_ready_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace ecps
