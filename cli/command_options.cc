#include "cli/command_options.h"

#include <memory>
#include <utility>

namespace ecps {
namespace {

const std::vector<std::pair<std::string, LogLevel>>& LogLevels() {
  static const auto* const levels = new std::vector<std::pair<std::string, LogLevel>>{
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}};
  return *levels;
}

void BindRun(CommandBinder& b, RunOptions* o) {
  b.Operands(&o->operands);
  b.Text("output", &o->output);
  b.Switch("no-progress", &o->no_progress);
  b.Choice<LaunchBackendKind>(
      "backend", {{"local", LaunchBackendKind::kLocal}, {"slurm", LaunchBackendKind::kSlurm}},
      &o->backend);
}

void BindBench(CommandBinder& b, BenchOptions* o) {
  b.Operands(&o->operands);
  b.Text("output", &o->output);
}

void BindExport(CommandBinder& b, ExportOptions* o) {
  b.Operands(&o->operands);
  b.Text("output", &o->output);
  b.Switch("with-optimizer-state", &o->with_optimizer_state);
}

void BindSlurm(CommandBinder& b, SlurmOptions* o) {
  b.Operands(&o->operands);
  b.Text("script", &o->script);
  b.Text("output", &o->output);
}

void BindK8s(CommandBinder& b, K8sOptions* o) {
  b.Operands(&o->operands);
  b.Text("dir", &o->dir);
}

void BindOperator(CommandBinder& b, OperatorOptions* o) {
  b.Operands(&o->operands);
  b.Text("token", &o->token);
  b.Text("job", &o->job);
  b.Text("tls-ca", &o->tls_ca);
  b.Text("tls-cert", &o->tls_cert);
  b.Text("tls-key", &o->tls_key);
}

void BindStatus(CommandBinder& b, StatusOptions* o) {
  BindOperator(b, o);
  b.Switch("json", &o->json);
  b.Switch("watch", &o->watch);
  b.Integer("interval-ms", &o->interval_ms);
}

void BindHealth(CommandBinder& b, HealthOptions* o) {
  b.Operands(&o->operands);
  b.Text("service", &o->service);
  b.Integer("deadline-ms", &o->deadline_ms);
  b.Text("tls-ca", &o->tls_ca);
  b.Text("tls-cert", &o->tls_cert);
  b.Text("tls-key", &o->tls_key);
}

void BindRole(CommandBinder& b, RoleOptions* o) {
  b.Operands(&o->operands);
  b.Text("spec", &o->spec);
  b.Text("token", &o->token);
  b.Choice("log-level", LogLevels(), &o->log_level);
  b.Text("host", &o->host);
}

void BindCoordinator(CommandBinder& b, CoordinatorRoleOptions* o) {
  BindRole(b, o);
  b.Text("advertise", &o->advertise);
  b.Integer("port", &o->port);
  b.Integer("linger-ms", &o->linger_ms);
  b.Text("port-file", &o->port_file);
  b.Text("address-file", &o->address_file);
  b.Text("final-status", &o->final_status);
  b.Text("state-dir", &o->state_dir);
}

void BindDialingRole(CommandBinder& b, DialingRoleOptions* o) {
  BindRole(b, o);
  b.Text("coordinator", &o->coordinator);
  b.Text("coordinator-file", &o->coordinator_file);
  b.Integer("id", &o->id);
  b.Integer("port", &o->port);
}

void BindServer(CommandBinder& b, ServerRoleOptions* o) {
  BindDialingRole(b, o);
  b.Text("advertise", &o->advertise);
}

// A command's binding: fresh options of type Options for each parse, bound by `bind`, and
// the handler called with them.
template <typename Options>
CommandBinding Binding(void (*bind)(CommandBinder&, Options*),
                       std::function<int(const Options&)> handler) {
  return [bind, handler = std::move(handler)](CommandBinder& binder) -> std::function<int()> {
    // Without a handler nothing is bound: the parser binds the flags to its own values, which
    // live as long as it does (these options would not).
    if (!handler) return nullptr;
    auto options = std::make_shared<Options>();
    bind(binder, options.get());
    return [options, handler] { return handler(*options); };
  };
}

}  // namespace

std::string LogLevelName(LogLevel level) {
  for (const auto& [name, value] : LogLevels()) {
    if (value == level) return name;
  }
  return "info";
}

CommandBindings BindCommands(const CommandHandlers& h) {
  return {
      {"run", Binding(&BindRun, h.run)},
      {"bench throughput", Binding(&BindBench, h.bench_throughput)},
      {"bench recovery", Binding(&BindBench, h.bench_recovery)},
      {"checkpoint", Binding(&BindOperator, h.checkpoint)},
      {"export", Binding(&BindExport, h.export_checkpoint)},
      {"scrub", Binding(&BindOperator, h.scrub)},
      {"status", Binding(&BindStatus, h.status)},
      {"kill", Binding(&BindOperator, h.kill)},
      {"health", Binding(&BindHealth, h.health)},
      {"slurm", Binding(&BindSlurm, h.slurm)},
      {"k8s", Binding(&BindK8s, h.k8s)},
      {"coordinator", Binding(&BindCoordinator, h.coordinator)},
      {"server", Binding(&BindServer, h.server)},
      {"worker", Binding(&BindDialingRole, h.worker)},
  };
}

}  // namespace ecps
