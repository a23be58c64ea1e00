// What `ecps run` shows and records while a job runs: the live progress line and the row of
// metrics.csv (pure functions of the coordinator's status), the printer that keeps the line
// on one terminal line, and the events printed between updates.
#ifndef ECPS_CLI_PROGRESS_LINE_H_
#define ECPS_CLI_PROGRESS_LINE_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/ecps.pb.h"
#include "runtime/metrics.h"  // PhaseName

namespace ecps {

// "45s", "2m05s", "1h02m"; "--" for a negative or infinite duration (unknown).
std::string FormatDuration(double seconds);
// "epoch 2/3": the slowest worker's pass over the data of data.epochs; empty for one pass.
std::string DataEpoch(const v1::StatusResponse& st);

// "server 2", "worker 0".
std::string NodeLabel(v1::Role role, int id);

// "[running] step 120/1000 (12%) | 4210 samples/s | loss 0.4521 | AUC 0.7123 | epoch 3 |
// elapsed 1m02s | ETA 8m15s", then one note per node that is recovering (with its rebuild
// progress), dead or suspect: "| recovering server 2: 45% rebuilt, 120 on demand".
std::string ProgressLine(const v1::StatusResponse& status);

// One event line per change in the coordinator's failure history since `seen` (failure
// index -> the state last reported), which it updates: declared dead, replaced, recovered.
std::vector<std::string> FailureHistoryEvents(const v1::StatusResponse& status,
                                              std::map<int, int>* seen);

// The columns of metrics.csv, and one row of it: the status at `t` seconds on the
// launcher's clock and the events of that poll (their commas turned into spaces).
extern const char kMetricsCsvHeader[];
std::string MetricsCsvRow(double t, const v1::StatusResponse& status, std::string events);

// The live progress line on stdout: rewritten in place on a terminal, one line every 5 s
// otherwise (a log file). Disabled, it prints no progress but still prints events.
// Thread-safe (the thread that answers Ctrl-C prints its events too: cli/interrupt.h).
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool enabled);
  void Update(const std::string& line);
  // Prints a full line (an event) without losing the progress line.
  void Event(const std::string& line);
  // Ends the progress line so that what follows starts on a line of its own.
  void Finish();

 private:
  void FinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool enabled_;
  const bool tty_;
  absl::Mutex mu_;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_ ABSL_GUARDED_BY(mu_){};
};

// The events of one poll of the job: each printed at once as "ecps: LINE" and kept, joined
// by "; ", for the metrics row of that poll.
class EventLog {
 public:
  explicit EventLog(ProgressPrinter* printer) : printer_(printer) {}
  void Add(const std::string& line);
  // Keeps `line` without printing it (printed otherwise, or not worth a line of its own).
  void Note(const std::string& line);
  // The events since the last Take(), and forgets them.
  std::string Take();

 private:
  ProgressPrinter* printer_;
  std::string events_;
};

}  // namespace ecps

#endif  // ECPS_CLI_PROGRESS_LINE_H_
