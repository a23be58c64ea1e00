#include "cli/k8s_yaml.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace ecps::k8s {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ObjectMeta Meta(const std::string& name) {
  return ObjectMeta{.name = name, .namespace_name = "ml"};
}

// A ConfigMap whose data holds `values` under keys v0, v1, ..., written and read back.
YAML::Node DataOf(const std::vector<std::string>& values) {
  ConfigMap map{.metadata = Meta("m")};
  for (size_t i = 0; i < values.size(); ++i) {
    map.data.emplace_back("v" + std::to_string(i), values[i]);
  }
  return YAML::Load(K8sObjectYaml(map))["data"];
}

// Strings that a plain scalar would turn into something else: a number, a boolean or a null
// to a YAML 1.1 reader (kubectl's: 0600 is octal 384, yes and Off are booleans) or a YAML 1.2
// one (1e3 is 1000), YAML 1.1's value and merge keys, the empty string (null).
const std::vector<std::string> kTyped = {
    "9400", "0600", "1e3", "1_000", "0x1F", "1:20", ".5", "+1",   "-1", ".inf", "true",
    "True", "yes",  "Off", "y",     "N",    "null", "~",  "NULL", "",   "=",    "<<"};

// Strings that a careless emitter writes as YAML with another value, or none: indicators at
// the start, ": " and " #" inside, quotes, a line break without a final newline, two final
// newlines, a first line that starts with a blank, a tab, a carriage return, a control
// character.
const std::vector<std::string> kOdd = {"- a",
                                       "-",
                                       "a: b",
                                       "a:",
                                       "k: v # c",
                                       "#c",
                                       "a #c",
                                       "\"dq\"",
                                       "'sq'",
                                       "it's",
                                       "say \"x\"",
                                       "back\\slash",
                                       "[a, b]",
                                       "{a: b}",
                                       "*alias",
                                       "&anchor",
                                       "!tag",
                                       "%directive",
                                       "@at",
                                       "`tick",
                                       "| block",
                                       "> folded",
                                       "? key",
                                       " lead",
                                       "trail ",
                                       "line1\nline2",
                                       "line1\nline2\n",
                                       "two finals\n\n",
                                       "\n",
                                       "\nafter a blank line\n",
                                       " indented first\nsecond\n",
                                       "  \n",
                                       "a\n  \nb\n",
                                       "tab\there",
                                       "tab\tline\n",
                                       "crlf\r\nline\r\n",
                                       "bell\a",
                                       "---",
                                       "...",
                                       "a\n---\nb\n",
                                       "caf\xc3\xa9"};

TEST(K8sYamlTest, StringsThatReadAsAnotherTypeAreQuoted) {
  const YAML::Node data = DataOf(kTyped);
  for (size_t i = 0; i < kTyped.size(); ++i) {
    const YAML::Node value = data["v" + std::to_string(i)];
    SCOPED_TRACE("\"" + kTyped[i] + "\"");
    ASSERT_TRUE(value.IsScalar());
    EXPECT_EQ(value.as<std::string>(), kTyped[i]);
    // "!": a quoted scalar, a string whatever its text; "?": plain, typed by the reader.
    EXPECT_EQ(value.Tag(), "!");
  }
}

TEST(K8sYamlTest, OddStringsReadBackAsThemselves) {
  const YAML::Node data = DataOf(kOdd);
  for (size_t i = 0; i < kOdd.size(); ++i) {
    const YAML::Node value = data["v" + std::to_string(i)];
    SCOPED_TRACE("\"" + kOdd[i] + "\"");
    ASSERT_TRUE(value.IsScalar());
    EXPECT_EQ(value.as<std::string>(), kOdd[i]);
  }
}

TEST(K8sYamlTest, OrdinaryStringsStayPlainAndScriptsAreBlocks) {
  const std::string script = "a=1\necho \"$a\" >&2\n";
  ConfigMap map{
      .metadata = Meta("m"),
      .data = {
          {"image", "registry.example.org/ecps:1.0"}, {"path", "/metrics"}, {"script", script}}};
  const std::string text = K8sObjectYaml(map);
  EXPECT_THAT(text, HasSubstr("  image: registry.example.org/ecps:1.0\n"));
  EXPECT_THAT(text, HasSubstr("  path: /metrics\n"));
  EXPECT_THAT(text, HasSubstr("  script: |\n    a=1\n    echo \"$a\" >&2\n"));
  EXPECT_EQ(YAML::Load(text)["data"]["script"].as<std::string>(), script);
}

TEST(K8sYamlTest, KeysFromTheSpecAreQuotedAsValuesAre) {
  PodSpec pod{.node_selector = {{"yes", "0600"}, {"1e3", "x"}, {"a: b", ""}, {"pool", "train"}},
              .containers = {Container{.name = "c", .image = "i"}}};
  Job job{.metadata = Meta("j"), .spec = {.pod_template = {.spec = pod}}};
  const YAML::Node selector =
      YAML::Load(K8sObjectYaml(job))["spec"]["template"]["spec"]["nodeSelector"];
  std::vector<std::string> keys;
  for (const auto& kv : selector) {
    keys.push_back(kv.first.as<std::string>());
    if (keys.back() != "pool") {
      EXPECT_NE(kv.first.Tag(), "?") << keys.back();
    }
  }
  EXPECT_THAT(keys, testing::ElementsAre("yes", "1e3", "a: b", "pool"));
  EXPECT_EQ(selector["yes"].as<std::string>(), "0600");
  EXPECT_EQ(selector["yes"].Tag(), "!");
  EXPECT_EQ(selector["a: b"].as<std::string>(), "");
  EXPECT_EQ(selector["a: b"].Tag(), "!");
}

TEST(K8sYamlTest, NumbersAndBooleansAreTyped) {
  Service service{.metadata = Meta("s"),
                  .spec = {.publish_not_ready_addresses = true,
                           .selector = {{"app", "x"}},
                           .ports = {{.name = "grpc", .port = 7070, .target_port = "grpc"}}}};
  const YAML::Node spec = YAML::Load(K8sObjectYaml(service))["spec"];
  EXPECT_EQ(spec["publishNotReadyAddresses"].Tag(), "?");
  EXPECT_EQ(spec["publishNotReadyAddresses"].Scalar(), "true");
  EXPECT_EQ(spec["ports"][0]["port"].Tag(), "?");
  EXPECT_EQ(spec["ports"][0]["port"].Scalar(), "7070");
  EXPECT_EQ(spec["ports"][0]["targetPort"].as<std::string>(), "grpc");
  EXPECT_FALSE(spec["clusterIP"]);  // left out: Kubernetes assigns one

  // A file mode in decimal: 0440 written as such would be 440 to a YAML 1.2 reader.
  StatefulSet set{.metadata = Meta("s")};
  set.spec.pod_template.spec.containers.push_back(Container{.name = "c", .image = "i"});
  set.spec.pod_template.spec.volumes.push_back(Volume{
      .name = "tls", .source = SecretVolumeSource{.secret_name = "t", .default_mode = 0440}});
  const YAML::Node volume =
      YAML::Load(K8sObjectYaml(set))["spec"]["template"]["spec"]["volumes"][0];
  EXPECT_EQ(volume["secret"]["defaultMode"].Scalar(), "288");
  EXPECT_EQ(volume["secret"]["defaultMode"].Tag(), "?");
}

TEST(K8sYamlTest, EmptyFieldsAreLeftOutButTheOnesKubernetesReadsOtherwise) {
  Container c{.name = "worker",
              .image = "ecps:1",
              .command = {"ecps"},
              .resources = ResourceRequirements{.limits = {{"nvidia.com/gpu", "2"}}},
              .liveness_probe = Probe{.action = GrpcAction{.port = 7072}}};
  Job job{.metadata = Meta("w"), .spec = {.pod_template = {.spec = {.containers = {c}}}}};
  job.spec.pod_template.spec.volumes.push_back(
      Volume{.name = "scratch", .source = EmptyDirVolumeSource{}});
  const YAML::Node pod = YAML::Load(K8sObjectYaml(job))["spec"]["template"]["spec"];
  const YAML::Node container = pod["containers"][0];
  EXPECT_FALSE(container["args"]);
  EXPECT_FALSE(container["env"]);
  EXPECT_FALSE(container["readinessProbe"]);
  EXPECT_FALSE(pod["serviceAccountName"]);
  EXPECT_FALSE(pod["nodeSelector"]);
  EXPECT_FALSE(pod["securityContext"]);
  // The whole server's health: service "" is asked for, not left to a default.
  EXPECT_EQ(container["livenessProbe"]["grpc"]["service"].as<std::string>(), "");
  EXPECT_EQ(container["livenessProbe"]["grpc"]["service"].Tag(), "!");
  EXPECT_TRUE(container["resources"]["requests"].IsMap());
  EXPECT_EQ(container["resources"]["requests"].size(), 0u);
  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpu"].Tag(), "!");
  // An emptyDir is an empty map, not a null.
  EXPECT_TRUE(pod["volumes"][0]["emptyDir"].IsMap());
  // Kubernetes' defaults are true: false is written.
  EXPECT_EQ(pod["enableServiceLinks"].Scalar(), "true");
  job.spec.pod_template.spec.enable_service_links = false;
  EXPECT_EQ(
      YAML::Load(K8sObjectYaml(job))["spec"]["template"]["spec"]["enableServiceLinks"].Scalar(),
      "false");
}

TEST(K8sYamlTest, EveryKindHasItsApiVersionAndOneDocument) {
  const std::vector<std::pair<Object, std::string>> objects = {
      {ConfigMap{.metadata = Meta("a")}, "v1"},
      {Secret{.metadata = Meta("b"), .type = "Opaque"}, "v1"},
      {Service{.metadata = Meta("c")}, "v1"},
      {StatefulSet{.metadata = Meta("d")}, "apps/v1"},
      {Job{.metadata = Meta("e")}, "batch/v1"}};
  for (const auto& [object, api_version] : objects) {
    const std::string text = K8sObjectYaml(object);
    SCOPED_TRACE(text);
    EXPECT_EQ(YAML::LoadAll(text).size(), 1u);
    EXPECT_EQ(text.back(), '\n');
    EXPECT_THAT(text, Not(HasSubstr("---")));
    const YAML::Node node = YAML::Load(text);
    EXPECT_EQ(node["apiVersion"].as<std::string>(), api_version);
    EXPECT_EQ(node["kind"].as<std::string>(), ObjectKind(object));
    EXPECT_EQ(node["metadata"]["name"].as<std::string>(), ObjectName(object));
    EXPECT_EQ(node["metadata"]["namespace"].as<std::string>(), "ml");
  }
}

}  // namespace
}  // namespace ecps::k8s
