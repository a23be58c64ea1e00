// The Rebuilder's lifecycle, its queues and loops, and a batch's lock-free reads; the frozen
// path, the reads and the installs are in rebuilder_install.cc.
#include "ps/rebuilder.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "ps/cond_wait.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {

Rebuilder::Rebuilder(RebuildOptions options, const RowCode* code, EmbeddingStore* embeddings,
                     ParityStore* parity, DenseStore* dense, StripeSource* peers)
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
      fanout_(std::min(2 * placement_.servers(), 64)),
      queue_(options_.max_hint_linger_ms, &hint_clock_) {
  rows_total_ = embeddings_->invalid_rows() + (parity_ != nullptr ? parity_->invalid_rows() : 0);
}

Rebuilder::~Rebuilder() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  rebuilt_cv_.SignalAll();
  queue_.Close();
  stop_cv_.SignalAll();
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
  if (!urgent) queue_.NoteHint();
  std::vector<int64_t> table_missing;
  for (const TableRowsRef& t : rows) {
    table_missing.clear();
    embeddings_->MissingRows(t.table, t.rows, &table_missing);
    for (int64_t row : table_missing) missing.push_back({t.table, row});
  }
  if (missing.empty()) return missing;
  std::vector<Item> stripes;
  stripes.reserve(missing.size());
  for (const auto& [table, row] : missing) stripes.push_back(Item{table, row / placement_.k()});
  queue_.Add(stripes, urgent);
  return missing;
}

void Rebuilder::Prefetch(absl::Span<const TableRowsRef> rows) { QueueMissing(rows, false); }

absl::Status Rebuilder::EnsureRows(absl::Span<const TableRowsRef> rows, int timeout_ms) {
  const std::vector<std::pair<int, int64_t>> missing = QueueMissing(rows, /*urgent=*/true);
  if (missing.empty()) return absl::OkStatus();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  absl::MutexLock lock(&mu_);
  size_t checked = 0;  // rows before this one are valid (rows never become invalid again)
  bool ok = false;
  while (true) {
    if (stopping_ || !error_.ok()) break;
    while (checked < missing.size() &&
           embeddings_->IsValid(missing[checked].first, missing[checked].second)) {
      ++checked;
    }
    if (checked == missing.size()) {
      ok = true;
      break;
    }
    if (!WaitBefore(&rebuilt_cv_, &mu_, deadline)) break;
  }
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  absl::MutexLock lock(&mu_);
  while (!stopping_ && error_.ok() && !dense_ready()) {
    if (!WaitBefore(&rebuilt_cv_, &mu_, deadline)) break;
  }
  if (!error_.ok()) return error_;
  if (stopping_ || !dense_ready()) {
    return absl::DeadlineExceededError("dense tensors not restored in time");
  }
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
  absl::MutexLock lock(&mu_);
  p.on_demand = on_demand_count_;
  p.on_demand_batches = static_cast<int64_t>(on_demand_ms_.size());
  return p;
}

absl::Status Rebuilder::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

void Rebuilder::NotifyRebuilt() {
  { absl::MutexLock lock(&mu_); }
  rebuilt_cv_.SignalAll();
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
  std::vector<Item> hot;
  hot.reserve(order.size());
  for (const auto& [h, item] : order) hot.push_back(item);
  queue_.SetHot(std::move(hot));
  spdlog::info("server {}: rebuilding {} hot rows first", options_.server, queue_.hot());
}

RetryPolicy Rebuilder::BatchRetry() {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(50);
  policy.multiplier = 1;
  policy.increment = std::chrono::milliseconds(50);
  policy.max_backoff = std::chrono::milliseconds(1000);
  policy.codes = StatusCodeSet::AllErrors();
  return policy;
}

bool Rebuilder::Backoff(Retrier* retrier, const absl::Status& status) {
  retrier->CountAttempt();
  const int failures = retrier->attempts();
  if (failures == 1 || failures % 20 == 0) {
    spdlog::warn("server {}: rebuild batch failed ({} in a row): {}", options_.server, failures,
                 status.ToString());
  }
  // Keep trying: a member that is unreachable now (a peer being replaced too, a transient
  // partition) may come back; requests waiting for rows time out on their own.
  const auto deadline = std::chrono::steady_clock::now() + retrier->NextBackoff();
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (!WaitBefore(&stop_cv_, &mu_, deadline)) break;
  }
  return !stopping_;
}

void Rebuilder::OnDemandLoop() {
  Retrier retrier(BatchRetry());
  Members scratch;
  std::vector<Item> items;
  while (true) {
    items.clear();
    if (!queue_.WaitAndTake(options_.batch_stripes, &items)) return;
    int64_t rebuilt = 0;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = RunBatch(items, /*restore_dense=*/false, &scratch, &rebuilt);
    {
      absl::MutexLock lock(&mu_);
      on_demand_count_ += rebuilt;
      if (rebuilt > 0) {
        on_demand_ms_.push_back(std::chrono::duration<double, std::milli>(
                                    std::chrono::steady_clock::now() - t0)
                                    .count());
      }
    }
    // Even a failed batch may have installed rows. (The lock above was taken after the
    // installs, so no waiter checked before them and waits past this notify.)
    rebuilt_cv_.SignalAll();
    if (!s.ok()) {
      // Requests may wait for them: retry once the backoff is over.
      queue_.PutBack(items);
      if (!Backoff(&retrier, s)) return;
      continue;
    }
    retrier.Reset();
  }
}

void Rebuilder::NextSweepItems(bool background, std::vector<Item>* items) {
  if (!background) return;
  const size_t batch = static_cast<size_t>(std::max(options_.batch_stripes, 0));
  queue_.TakeHot(batch, [this](const Item& item) { return !ItemValid(item); }, items);
  while (items->size() < batch && cursor_table_ < placement_.num_tables()) {
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
      if (row >= 0 && !embeddings_->IsValid(t, row)) {
        items->push_back(Item{t, row / placement_.k()});
      }
    } else {
      int q = 0;
      int64_t stripe = placement_.StripeAtParitySlot(t, options_.server, slot, &q);
      if (stripe >= 0 && !parity_->IsValid(t, stripe)) items->push_back(Item{t, stripe});
    }
  }
}

void Rebuilder::Loop() {
  LoadHotRows();
  Retrier retrier(BatchRetry());
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
    bool capped;  // the rate limit holds the background sweep back now
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      // The background sweep (when the rate limit allows): the rows updated most before the
      // failure, hottest first; then data slots of every table, then parity slots. Rows
      // workers ask for are rebuilt by OnDemandLoop meanwhile.
      capped = !uncapped && std::chrono::steady_clock::now() < background_allowed_at_;
      NextSweepItems(!capped, &items);
    }
    bool rows_left = !embeddings_->all_valid() || (parity_ != nullptr && !parity_->all_valid());
    if (items.empty() && !rows_left && dense_ready()) break;
    if (items.empty() && capped) {
      // Rate-limited: wait for the budget (at most 100 ms at a time, to notice the end of
      // training).
      absl::MutexLock lock(&mu_);
      const auto deadline = std::min(background_allowed_at_, std::chrono::steady_clock::now() +
                                                                 std::chrono::milliseconds(100));
      while (!stopping_) {
        if (!WaitBefore(&stop_cv_, &mu_, deadline)) break;
      }
      continue;
    }
    if (items.empty() && rows_left) {
      // The sweep is over but rows remain (a failed batch): sweep again.
      absl::MutexLock lock(&mu_);
      cursor_table_ = 0;
      cursor_slot_ = 0;
      cursor_parity_ = false;
    }
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = RunBatch(items, !dense_ready(), &scratch);
    // Even a failed batch may have installed rows.
    NotifyRebuilt();
    if (!s.ok()) {
      if (!Backoff(&retrier, s)) return;
      continue;
    }
    retrier.Reset();
    if (options_.rate_limit_mb_s > 0 && !uncapped && !items.empty()) {
      // The next background batch waits until the background reads so far fit the rate
      // limit; rows workers ask for are never held back, and do not count.
      double mb = items.size() * payload_bytes_ * placement_.k() / 1e6;
      auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(mb / options_.rate_limit_mb_s));
      absl::MutexLock lock(&mu_);
      background_allowed_at_ = std::max(background_allowed_at_, t0) + wait;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    done_.store(true, std::memory_order_release);
  }
  rebuilt_cv_.SignalAll();
  queue_.Close();
  LogDone();
}

void Rebuilder::LogDone() {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::vector<double> ms;
  {
    absl::MutexLock lock(&mu_);
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
    if (absl::Status s = Install(items, scratch->got, /*frozen=*/false, &retry); !s.ok()) {
      return s;
    }
    items.swap(retry);
  }
  if (items.empty()) return absl::OkStatus();
  frozen_stripes_.fetch_add(static_cast<int64_t>(items.size()), std::memory_order_relaxed);
  return RunFrozen(items, /*restore_dense=*/false);
}

}  // namespace ecps
