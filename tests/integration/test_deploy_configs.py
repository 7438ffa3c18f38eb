"""The shipped collector / compose / Tempo / Prometheus / Grafana files agree with each
other and with what otel_rl exports.

No container engine runs in CI, so nothing here starts the stack: the checks are the
ones a reader would do by hand — every file parses, every pipeline names components
that exist, every host:port one file names is a service and a port another file
declares, every mounted file exists, every metric and label the dashboard queries is
one otel_rl produces — plus one end-to-end check that spans otel_rl recorded, written
the way the collector's file exporter writes them, convert into a Perfetto document.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import orjson
import pytest
import yaml
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_rl
from otel_rl._internal import keys
from otel_rl._internal.recording.ids import trace_text
from otel_rl.cli import main as otel_rl_cli
from support.paths import ROOT


COMPOSE_FILE = ROOT / "docker-compose.yml"
COLLECTOR_CONFIGS = sorted((ROOT / "collector-config").glob("*.yaml"))
STACK_COLLECTOR_CONFIG = ROOT / "collector-config" / "otel-collector.yaml"
TEMPO_CONFIG = ROOT / "deploy" / "tempo.yaml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus.yaml"
GRAFANA_DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
GRAFANA_DASHBOARD_PROVIDERS = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml"
DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
SHIPPED_YAML = [COMPOSE_FILE, *COLLECTOR_CONFIGS, *sorted((ROOT / "deploy").rglob("*.yaml"))]

#: Images with neither a shell nor an HTTP client, so a Docker healthcheck cannot run
#: in them: the collector contrib image is built FROM scratch, Tempo's is distroless.
IMAGES_WITHOUT_A_SHELL = {"otel/opentelemetry-collector-contrib", "grafana/tempo"}

COMPONENT_KINDS = ("receivers", "processors", "exporters")


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


def services() -> dict[str, Any]:
    return compose()["services"]


def component_type(component_id: str) -> str:
    """``otlp_grpc/jaeger`` -> ``otlp_grpc``: the part of a component id before the slash."""
    return component_id.split("/", 1)[0]


def host_and_port(endpoint: str) -> tuple[str, int]:
    if "://" in endpoint:
        parsed = urlparse(endpoint)
        return parsed.hostname or "", parsed.port or 0
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def published_ports(service: dict[str, Any]) -> dict[int, str]:
    """Container port -> the host binding it is published on ("127.0.0.1:4317")."""
    out = {}
    for entry in service.get("ports", []):
        parts = str(entry).split(":")
        out[int(parts[-1].split("/")[0])] = ":".join(parts[:-1])
    return out


def listening_ports(service: dict[str, Any]) -> set[int]:
    """Ports the compose file says the service's container listens on."""
    return set(published_ports(service)) | {int(p) for p in service.get("expose", [])}


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, PurePosixPath, bool]]:
    """``(repository path, container path, read_only)`` of every ``./`` bind mount."""
    mounts = []
    for entry in service.get("volumes", []):
        source, target, *options = entry.split(":")
        if source.startswith("./"):
            mounts.append((ROOT / source, PurePosixPath(target), "ro" in options))
    return mounts


def repository_path(service: dict[str, Any], container_path: str) -> Path | None:
    """The repository file a container path of ``service`` is backed by, if any."""
    path = PurePosixPath(container_path)
    for source, target, _ in bind_mounts(service):
        if path == target or target in path.parents:
            return source / path.relative_to(target)
    return None


def collector_exporters(config: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: conf or {} for name, conf in config["exporters"].items() if component_type(name) == kind}


# --- every file parses and explains itself ---------------------------------------------

def test_the_collector_configs_the_readme_describes_are_shipped():
    assert {p.name for p in COLLECTOR_CONFIGS} >= {"otel-collector.yaml", "file-only.yaml"}


@pytest.mark.parametrize("path", SHIPPED_YAML, ids=relative)
def test_every_shipped_yaml_file_parses_to_a_mapping(path):
    assert isinstance(load_yaml(path), dict)


@pytest.mark.parametrize("path", SHIPPED_YAML, ids=relative)
def test_every_shipped_yaml_file_opens_with_a_comment_header(path):
    header = path.read_text(encoding="utf-8").splitlines()[:3]
    assert all(line.startswith("#") for line in header), f"{relative(path)} has no comment header"


@pytest.mark.parametrize("path", DASHBOARDS, ids=relative)
def test_every_dashboard_is_a_json_object_with_a_uid_and_panels(path):
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    assert dashboard["uid"] and dashboard["panels"]


# --- collector pipelines -------------------------------------------------------------------

@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=relative)
def test_pipelines_use_only_components_the_file_defines(path):
    config = load_yaml(path)
    for name, pipeline in config["service"]["pipelines"].items():
        for kind in COMPONENT_KINDS:
            undefined = set(pipeline.get(kind, [])) - set(config.get(kind) or {})
            assert not undefined, f"{relative(path)}: pipeline {name} uses undefined {kind} {undefined}"
    undefined = set(config["service"].get("extensions", [])) - set(config.get("extensions") or {})
    assert not undefined, f"{relative(path)}: service uses undefined extensions {undefined}"


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=relative)
def test_every_defined_component_is_used(path):
    # The collector rejects nothing unused, so a typo in a pipeline leaves a
    # component silently idle; this catches it from the other side.
    config = load_yaml(path)
    pipelines = config["service"]["pipelines"].values()
    for kind in COMPONENT_KINDS:
        used = {c for pipeline in pipelines for c in pipeline.get(kind, [])}
        assert set(config.get(kind) or {}) == used, f"{relative(path)}: unused {kind}"
    assert set(config.get("extensions") or {}) == set(config["service"].get("extensions", []))


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=relative)
def test_memory_limiter_is_the_first_processor_of_every_pipeline(path):
    for name, pipeline in load_yaml(path)["service"]["pipelines"].items():
        assert component_type(pipeline["processors"][0]) == "memory_limiter", name
        assert "batch" in map(component_type, pipeline["processors"]), name


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=relative)
def test_traces_and_metrics_from_otlp_reach_a_file(path):
    config = load_yaml(path)
    for signal in ("traces", "metrics"):
        pipeline = config["service"]["pipelines"][signal]
        assert [component_type(r) for r in pipeline["receivers"]] == ["otlp"]
        assert "file" in map(component_type, pipeline["exporters"]), signal


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=relative)
def test_file_exporters_write_plain_otlp_json_lines_the_converter_reads(path):
    # `otel-rl convert` reads JSON lines, plain or gzip: not the `proto` format, not
    # zstd, and not a rotated set of files.
    for name, conf in collector_exporters(load_yaml(path), "file").items():
        assert conf.get("format", "json") == "json", name
        assert "compression" not in conf and "rotation" not in conf, name
        assert conf["path"].endswith(".jsonl"), name


def test_the_stack_collector_sends_traces_to_jaeger_tempo_and_a_file():
    config = load_yaml(STACK_COLLECTOR_CONFIG)
    exporters = config["service"]["pipelines"]["traces"]["exporters"]
    assert {"otlp_grpc/jaeger", "otlp_grpc/tempo"} <= set(exporters)
    assert "prometheus" in config["service"]["pipelines"]["metrics"]["exporters"]
    for name in ("otlp_grpc/jaeger", "otlp_grpc/tempo"):
        assert config["exporters"][name]["tls"]["insecure"] is True


def test_the_stack_collector_listens_on_every_interface_of_its_container():
    # Collector components default to localhost, which published ports and the other
    # containers cannot reach.
    config = load_yaml(STACK_COLLECTOR_CONFIG)
    endpoints = [p["endpoint"] for p in config["receivers"]["otlp"]["protocols"].values()]
    endpoints += [config["extensions"]["health_check"]["endpoint"],
                  config["exporters"]["prometheus"]["endpoint"]]
    assert {host_and_port(e)[0] for e in endpoints} == {"0.0.0.0"}


# --- compose -------------------------------------------------------------------------------

def test_every_compose_image_is_pinned_to_a_release():
    for name, service in services().items():
        repository, _, tag = service["image"].rpartition(":")
        assert repository and "/" not in tag, f"{name}: no tag in {service['image']}"
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: {tag!r} is not a release version"


def test_every_file_mounted_in_compose_exists_in_the_repository():
    for name, service in services().items():
        for source, target, _ in bind_mounts(service):
            assert source.exists(), f"{name} mounts {relative(source)} at {target}, which is missing"


def test_configuration_files_are_mounted_read_only():
    for name, service in services().items():
        for source, target, read_only in bind_mounts(service):
            if source.is_file() or "provisioning" in source.parts or "dashboards" in source.parts:
                assert read_only, f"{name}: {relative(source)} should be mounted :ro"


def test_each_service_reads_its_configuration_from_a_mounted_repository_file():
    flag = re.compile(r"^--?config(?:\.file)?=(.+)$")
    for name, service in services().items():
        for argument in service.get("command", []):
            match = flag.match(argument)
            if match:
                backing = repository_path(service, match.group(1))
                assert backing is not None and backing.is_file(), f"{name}: {argument}"


def test_the_collector_runs_the_stack_config():
    collector = services()["otel-collector"]
    (config_flag,) = [a for a in collector["command"] if a.startswith("--config=")]
    assert repository_path(collector, config_flag.split("=", 1)[1]) == STACK_COLLECTOR_CONFIG


def test_every_service_the_collector_exports_to_exists_and_listens_on_that_port():
    config = load_yaml(STACK_COLLECTOR_CONFIG)
    targets = {name: conf["endpoint"] for name, conf in config["exporters"].items()
               if component_type(name) == "otlp_grpc"}
    assert targets
    for name, endpoint in targets.items():
        host, port = host_and_port(endpoint)
        assert host in services(), f"{name} sends to {host}, which is not a compose service"
        assert port in listening_ports(services()[host]), f"{name}: {host} does not listen on {port}"


def test_tempo_listens_where_compose_and_grafana_expect_it():
    tempo = load_yaml(TEMPO_CONFIG)
    protocols = tempo["distributor"]["receivers"]["otlp"]["protocols"]
    config_ports = {host_and_port(p["endpoint"])[1] for p in protocols.values()}
    config_ports.add(tempo["server"]["http_listen_port"])
    assert config_ports == listening_ports(services()["tempo"])


def test_the_collector_publishes_its_receivers_health_check_and_metrics_on_the_host():
    config = load_yaml(STACK_COLLECTOR_CONFIG)
    endpoints = [p["endpoint"] for p in config["receivers"]["otlp"]["protocols"].values()]
    endpoints += [config["extensions"]["health_check"]["endpoint"],
                  config["exporters"]["prometheus"]["endpoint"]]
    published = published_ports(services()["otel-collector"])
    assert {host_and_port(e)[1] for e in endpoints} == set(published)


def test_published_ports_are_bound_to_localhost_only():
    # Grafana runs with anonymous admin access: nothing may be reachable from elsewhere.
    for name, service in services().items():
        for port, binding in published_ports(service).items():
            assert binding.startswith("127.0.0.1:"), f"{name}: port {port} published on {binding!r}"


def test_every_published_port_is_documented_in_the_compose_header():
    header = []
    for line in COMPOSE_FILE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    documented = {int(m) for line in header for m in re.findall(r"^#\s+(\d{2,5})\s", line)}
    published = {int(b.rsplit(":", 1)[1]) for s in services().values() for b in published_ports(s).values()}
    assert published == documented


def test_the_file_exporter_writes_inside_a_directory_mounted_from_the_repository():
    collector = services()["otel-collector"]
    for name, conf in collector_exporters(load_yaml(STACK_COLLECTOR_CONFIG), "file").items():
        backing = repository_path(collector, conf["path"])
        assert backing is not None, f"{name} writes {conf['path']}, outside every bind mount"
        assert backing.parent.is_dir(), f"{name}: {relative(backing.parent)} is not in the repository"


def test_the_collector_output_directory_is_made_writable_before_the_collector_starts():
    collector = services()["otel-collector"]
    init_name = next(n for n, c in collector["depends_on"].items()
                     if c["condition"] == "service_completed_successfully")
    init = services()[init_name]
    output_dirs = {PurePosixPath(c["path"]).parent
                   for c in collector_exporters(load_yaml(STACK_COLLECTOR_CONFIG), "file").values()}
    for directory in output_dirs:
        host_dir = repository_path(collector, str(directory))
        init_dir = next(t for s, t, _ in bind_mounts(init) if s == host_dir)
        assert str(init_dir) in " ".join(init["command"])


def test_services_with_a_shell_have_a_healthcheck_and_the_others_none():
    for name, service in services().items():
        if service.get("restart") == "no":
            continue  # one-shot setup containers
        repository = service["image"].rpartition(":")[0]
        if repository in IMAGES_WITHOUT_A_SHELL:
            assert "healthcheck" not in service, f"{name}: a probe cannot run in {repository}"
        else:
            assert "healthcheck" in service, f"{name} has no healthcheck"


def test_every_healthcheck_probes_a_port_its_service_listens_on():
    for name, service in services().items():
        if "healthcheck" not in service:
            continue
        (url,) = [a for a in service["healthcheck"]["test"] if a.startswith("http://")]
        host, port = host_and_port(url)
        assert host == "localhost"
        assert port in listening_ports(service), f"{name} probes port {port}"


def test_services_waited_for_as_healthy_have_a_healthcheck():
    # depends_on ... service_healthy on a service without a healthcheck never starts.
    for name, service in services().items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services(), f"{name} depends on unknown {dependency}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services()[dependency], f"{name} waits for {dependency}"


def test_named_volumes_are_declared():
    declared = set(compose().get("volumes") or {})
    for name, service in services().items():
        for entry in service.get("volumes", []):
            source = entry.split(":")[0]
            if not source.startswith(("./", "/")):
                assert source in declared, f"{name} uses undeclared volume {source}"


# --- Prometheus and Grafana ------------------------------------------------------------------

def test_prometheus_scrapes_the_collectors_prometheus_exporter():
    port = host_and_port(load_yaml(STACK_COLLECTOR_CONFIG)["exporters"]["prometheus"]["endpoint"])[1]
    (job,) = load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert targets == [f"otel-collector:{port}"]
    assert "otel-collector" in services()


def test_prometheus_keeps_exemplars_for_the_trace_links():
    assert "--enable-feature=exemplar-storage" in services()["prometheus"]["command"]
    assert load_yaml(STACK_COLLECTOR_CONFIG)["exporters"]["prometheus"]["enable_open_metrics"] is True


def grafana_datasources() -> list[dict[str, Any]]:
    return load_yaml(GRAFANA_DATASOURCES)["datasources"]


def test_grafana_datasource_urls_point_at_compose_services_on_their_ports():
    sources = grafana_datasources()
    assert {s["type"] for s in sources} >= {"prometheus", "tempo"}
    for source in sources:
        host, port = host_and_port(source["url"])
        assert host in services(), f"{source['name']}: {host} is not a compose service"
        assert port in listening_ports(services()[host]), f"{source['name']}: port {port}"


def test_grafana_datasources_link_to_each_other_by_provisioned_uid():
    sources = {s["type"]: s for s in grafana_datasources()}
    uids = {s["uid"] for s in sources.values()}
    prometheus, tempo = sources["prometheus"]["jsonData"], sources["tempo"]["jsonData"]
    assert {d["datasourceUid"] for d in prometheus["exemplarTraceIdDestinations"]} <= uids
    assert prometheus["exemplarTraceIdDestinations"][0]["datasourceUid"] == sources["tempo"]["uid"]
    assert tempo["tracesToMetrics"]["datasourceUid"] == sources["prometheus"]["uid"]


def test_dashboards_use_only_provisioned_datasources():
    uids = {s["uid"] for s in grafana_datasources()}
    for path in DASHBOARDS:
        used = set(re.findall(r'"uid":\s*"([^"]+)"', path.read_text(encoding="utf-8")))
        used.discard(json.loads(path.read_text(encoding="utf-8"))["uid"])
        assert used <= uids, f"{relative(path)} uses unknown datasources {used - uids}"


def test_grafana_loads_the_shipped_dashboards():
    grafana = services()["grafana"]
    (provider,) = load_yaml(GRAFANA_DASHBOARD_PROVIDERS)["providers"]
    folder = repository_path(grafana, provider["options"]["path"])
    assert folder is not None and sorted(folder.glob("*.json")) == DASHBOARDS
    home = repository_path(grafana, grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert home in DASHBOARDS
    for provisioning in ("datasources", "dashboards"):
        assert repository_path(grafana, f"/etc/grafana/provisioning/{provisioning}") is not None


# --- metric and label names the dashboard queries -----------------------------------------
#
# The collector's `prometheus` exporter (translation_strategy UnderscoreEscapingWithSuffixes,
# as configured) names series with github.com/prometheus/otlptranslator, whose
# metric_namer.go / unit_namer.go (normalizeName, buildUnitSuffixes, addUnitTokens) do:
#   * split the OTel name on every character outside [a-zA-Z0-9:], join with "_";
#   * main unit (before "/") -> a word from unitMap ("s" -> "seconds", "By" -> "bytes",
#     "1" -> none); a unit containing "{" or "}" (an annotation like {session}) adds
#     nothing; the word is appended unless the name already has it as a token;
#   * a monotonic Sum (an OTel counter) gets "total" moved/added to the end;
#   * a gauge with unit "1" gets "_ratio".
# Histograms are then exposed as <name>_bucket (label le), <name>_sum and <name>_count.
# Attribute keys become labels by the same character replacement (LabelNamer:
# "rl.session.status" -> "rl_session_status"). The examples in the translator's README
# ("http.server.request.duration" s histogram -> http_server_request_duration_seconds,
# "requests.count" counter -> requests_count_total, "memory.usage" By gauge ->
# memory_usage_bytes, "cpu.utilization" 1 gauge -> cpu_utilization_ratio) are checked below.

UNIT_WORDS = {"d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
              "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes",
              "MiBy": "mebibytes", "GiBy": "gibibytes", "KBy": "kilobytes", "MBy": "megabytes",
              "GBy": "gigabytes", "m": "meters", "V": "volts", "A": "amperes", "J": "joules",
              "W": "watts", "g": "grams", "Cel": "celsius", "Hz": "hertz", "1": "", "%": "percent"}
PER_UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month",
                  "y": "year"}


def prometheus_label(key: str) -> str:
    label = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return f"key_{label}" if label[:1].isdigit() else label


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The series name for an OTLP metric; ``kind`` is histogram, counter, updowncounter or gauge."""
    tokens = [t for t in re.split(r"[^a-zA-Z0-9:]", name) if t]
    main, _, per = unit.partition("/")
    main, per = main.strip(), per.strip()
    if main and not re.search(r"[{}]", main):
        word = UNIT_WORDS.get(main, main)
        if word and word not in tokens:
            tokens.append(word)
    if per and not re.search(r"[{}]", per):
        word = "per_" + PER_UNIT_WORDS.get(per, per)
        if word not in tokens:
            tokens.append(word)
    if kind == "counter":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if kind == "gauge" and unit == "1":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    return "_".join(tokens)


@pytest.mark.parametrize(("name", "unit", "kind", "expected"), [
    ("http.server.request.duration", "s", "histogram", "http_server_request_duration_seconds"),
    ("requests.count", "1", "counter", "requests_count_total"),
    ("memory.usage", "By", "gauge", "memory_usage_bytes"),
    ("cpu.utilization", "1", "gauge", "cpu_utilization_ratio"),
    ("process.cpu.time", "s", "counter", "process_cpu_time_seconds_total"),
    ("queue.items", "{item}", "updowncounter", "queue_items"),
])
def test_prometheus_names_follow_the_collector_translator(name, unit, kind, expected):
    assert prometheus_name(name, unit, kind) == expected


@pytest.fixture
def recorded(tmp_path):
    """otel_rl run on in-memory providers: two finalized sessions with phases.

    Returns ``(spans, metrics_request)``: the SDK spans otel_rl produced and the
    OTLP ExportMetricsServiceRequest its session metrics encode to, i.e. what a
    collector receives.
    """
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    otel_rl.configure(fileroot=str(tmp_path), rank=0, export_interval_ms=20,
                      tracer_provider=tracer_provider, meter_provider=meter_provider)
    for status in (keys.STATUS_ACCEPTED, keys.STATUS_REJECTED):
        otel_rl.set_task_id(otel_rl.register_task())
        session_id = otel_rl.register_session()
        otel_rl.set_session_id(session_id)
        for phase in ("generate", "toolcall", "reward"):
            with otel_rl.trace_session_phase(phase):
                pass
        otel_rl.trace_session_event("mark_finalized", session_id=session_id, status=status)
    otel_rl.save(force=True)
    finished = list(spans.get_finished_spans())
    metrics = encode_metrics(reader.get_metrics_data())
    otel_rl.reset()
    return finished, metrics


def exported_series(metrics_request) -> dict[str, tuple[str, set[str]]]:
    """Prometheus base name -> (kind, label names) for otel_rl's instruments."""
    out = {}
    for resource_metrics in metrics_request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != keys.INSTRUMENTATION_NAME:
                continue
            for metric in scope_metrics.metrics:
                data = metric.WhichOneof("data")
                kind = {"histogram": "histogram", "gauge": "gauge"}.get(data) or (
                    "counter" if metric.sum.is_monotonic else "updowncounter")
                points = getattr(metric, data).data_points
                labels = {prometheus_label(kv.key) for point in points for kv in point.attributes}
                out[prometheus_name(metric.name, metric.unit, kind)] = (kind, labels)
    return out


def series_names(base: str, kind: str) -> set[str]:
    return {base + suffix for suffix in ("_bucket", "_sum", "_count")} if kind == "histogram" else {base}


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboards, the Tempo data source's related-metrics
    queries and the dashboard variables."""
    queries = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                queries.append(node["expr"])
            if isinstance(node.get("definition"), str):
                queries.append(node["definition"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in DASHBOARDS:
        walk(json.loads(path.read_text(encoding="utf-8")))
    tempo = next(s for s in grafana_datasources() if s["type"] == "tempo")
    # $$ is the provisioning file's escape for a literal $.
    queries += [q["query"].replace("$$", "$") for q in tempo["jsonData"]["tracesToMetrics"]["queries"]]
    return queries


GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
MATCHERS = re.compile(r"\{([^}]*)\}")
FUNCTIONS_AND_KEYWORDS = {
    "sum", "rate", "increase", "histogram_quantile", "last_over_time", "max_over_time", "by",
    "without", "label_values", "avg", "max", "min", "count", "irate", "on", "ignoring",
}


def metric_names_in(query: str) -> set[str]:
    query = GROUPING.sub(" ", MATCHERS.sub(" ", query))
    query = re.sub(r"\[[^\]]*\]|\"[^\"]*\"|\$\w+", " ", query)
    if query.strip().startswith("label_values"):
        query = query.split(",")[0]
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", query))
    return words - FUNCTIONS_AND_KEYWORDS


def label_names_in(query: str) -> set[str]:
    names = set()
    for group in GROUPING.findall(query):
        names |= {n.strip() for n in group.split(",") if n.strip()}
    for matchers in MATCHERS.findall(query):
        names |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    variables = re.match(r"\s*label_values\([^,]+,\s*(\w+)\)", query)
    if variables:
        names.add(variables.group(1))
    return names


def test_the_dashboard_queries_only_metrics_otel_rl_exports(recorded):
    _, metrics = recorded
    exported = exported_series(metrics)
    known = set().union(*(series_names(base, kind) for base, (kind, _) in exported.items()))
    for query in dashboard_queries():
        unknown = metric_names_in(query) - known
        assert not unknown, f"{query!r} uses {unknown}; otel_rl exports {sorted(known)}"


def test_every_otel_rl_instrument_is_charted(recorded):
    _, metrics = recorded
    used = set().union(*(metric_names_in(q) for q in dashboard_queries()))
    for base, (kind, _) in exported_series(metrics).items():
        assert series_names(base, kind) & used, f"{base} is exported but not charted"


def test_the_dashboard_filters_and_groups_only_by_labels_the_series_carry(recorded):
    spans, metrics = recorded
    # With resource_to_telemetry_conversion the resource attributes are labels too.
    resource_labels = {prometheus_label(k) for k in spans[0].resource.attributes}
    assert {prometheus_label(keys.RANK), prometheus_label(keys.EXPERIMENT)} <= resource_labels
    attribute_labels = set().union(*(labels for _, labels in exported_series(metrics).values()))
    known = resource_labels | attribute_labels | {"le", "job", "instance"}
    for query in dashboard_queries():
        unknown = label_names_in(query) - known
        assert not unknown, f"{query!r} uses labels {unknown}"


def test_the_dashboard_charts_the_rollout_questions(recorded):
    _, metrics = recorded
    status, phase = prometheus_label(keys.SESSION_STATUS), prometheus_label(keys.PHASE)

    def series(kind: str, label: str) -> str:
        (name,) = [b for b, (k, labels) in exported_series(metrics).items() if k == kind and label in labels]
        return name

    session_duration, phase_duration = series("histogram", status), series("histogram", phase)
    sessions = series("counter", status)
    queries = [re.sub(r"\s+", " ", q) for q in dashboard_queries()]

    def charted(*needles: str) -> bool:
        return any(all(n in q for n in needles) for q in queries)

    for quantile in ("0.5", "0.95"):
        assert charted(f"histogram_quantile({quantile}", f"{session_duration}_bucket", f"by (le, {status})")
        assert charted(f"histogram_quantile({quantile}", f"{phase_duration}_bucket", f"by (le, {phase})")
    assert charted(f'{sessions}{{{status}="{keys.STATUS_ACCEPTED}"', ") / sum(", sessions)
    assert charted("rate(", sessions, f"by ({status})")


# --- the collector's file output opens in Perfetto -----------------------------------------

def hex_ids(node: Any) -> Any:
    """protobuf's JSON mapping writes bytes as base64; OTLP/JSON (and the collector's
    file exporter) writes trace and span ids as hex."""
    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and v
                    else hex_ids(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [hex_ids(v) for v in node]
    return node


def otlp_json_line(request) -> bytes:
    """One request the way the file exporter writes it: camelCase fields, integer enums,
    hex ids, int64 values as strings, one JSON object per line."""
    return orjson.dumps(hex_ids(json_format.MessageToDict(request, use_integers_for_enums=True))) + b"\n"


def test_otel_rl_spans_in_the_collectors_file_format_convert_to_a_perfetto_document(recorded, tmp_path):
    spans, metrics = recorded
    output_dir = tmp_path / "otel-data"
    output_dir.mkdir()
    # Two export requests, as two batches of the collector would arrive; the metrics
    # file beside it is what the stack's file/metrics exporter writes.
    half = len(spans) // 2
    (output_dir / "traces.jsonl").write_bytes(
        otlp_json_line(encode_spans(spans[:half])) + otlp_json_line(encode_spans(spans[half:])))
    (output_dir / "metrics.jsonl").write_bytes(otlp_json_line(metrics))
    out = tmp_path / "trace.json"

    assert otel_rl_cli(["convert", str(output_dir), "-o", str(out)]) == 0

    document = orjson.loads(out.read_bytes())
    slices = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    assert sorted(e["name"] for e in slices) == sorted(s.name for s in spans)
    by_span_id = {e["args"]["id"]: e for e in slices}
    for span in spans:
        event = by_span_id[f"{span.context.span_id:016x}"]
        # A root's line leaves its trace out: the trace id is its own span id.
        assert event["args"].get("trace", event["args"]["id"]) == trace_text(span.context.trace_id)
        assert event["ts"] == pytest.approx(span.start_time / 1000)
        assert event["dur"] == pytest.approx((span.end_time - span.start_time) / 1000)
    sessions = [e for e in slices if e["name"] == "session"]
    assert sorted(e["args"][keys.SESSION_STATUS] for e in sessions) == [
        keys.STATUS_ACCEPTED, keys.STATUS_REJECTED]
