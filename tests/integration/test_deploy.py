"""deploy/ stays consistent with the code: Dockerfile, docker-compose, Prometheus, Kubernetes.

Nothing here builds or runs a container: every file is parsed and checked against the
repository (paths that must exist), the proxy's own defaults (proxy.config.settings), the routes
the app really serves (asked through Starlette's test client) and each other (service
names, ports, labels, mount points).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from starlette.testclient import TestClient

from proxy.cli.main import anonymous_refusal
from proxy.config.settings import ENV_PREFIX, AuthSettings, ConfigError, Settings, load_settings
from proxy.http.app import create_app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
COMPOSE = DEPLOY / "docker-compose.yml"
CONFIG = DEPLOY / "config.yaml"
PROMETHEUS = DEPLOY / "prometheus.yml"
GRAFANA_DASHBOARD_PROVIDERS = ROOT / "grafana" / "provisioning" / "dashboards" / "dashboards.yml"
GRAFANA_DATASOURCES = ROOT / "grafana" / "provisioning" / "datasources"

PORT = Settings().server.port
NAMESPACED = frozenset(
    {
        "ConfigMap",
        "Deployment",
        "Service",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
    }
)
# Stands in for a value that comes from a Secret or the shell at deploy time.
PLACEHOLDER = "placeholder-from-secret"


# --- parsing helpers ------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "Dockerfile ends inside a line continuation"
    return instructions


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), args
    return value


def env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # legacy `ENV KEY value`
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words)


def urls_in(text: str) -> list[str]:
    return re.findall(r"https?://[^\s'\"]+", text)


def yaml_docs(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool


def compose_mounts(service: dict[str, Any]) -> list[Mount]:
    mounts = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            mounts.append(
                Mount(str(entry["source"]), str(entry["target"]), bool(entry.get("read_only")))
            )
            continue
        source, target, *mode = str(entry).split(":")
        mounts.append(Mount(source, target, "ro" in ",".join(mode).split(",")))
    return mounts


def is_bind(mount: Mount) -> bool:
    return mount.source.startswith((".", "/", "~"))


def container_ports(service: dict[str, Any]) -> dict[int, int]:
    """Published ports of a compose service: container port -> host port."""
    ports = {}
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports[int(entry["target"])] = int(entry["published"])
            continue
        parts = str(entry).split("/")[0].split(":")
        ports[int(parts[-1])] = int(parts[-2]) if len(parts) > 1 else int(parts[-1])
    return ports


def compose_environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment, `${VAR…}` interpolations replaced by a placeholder."""
    raw = service.get("environment", {})
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, PLACEHOLDER) for item in raw)
    return {
        str(name): PLACEHOLDER if value is None or "${" in str(value) else str(value)
        for name, value in raw.items()
    }


def k8s_environment(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for item in container.get("env", []):
        env[item["name"]] = str(item["value"]) if "value" in item else PLACEHOLDER
    return env


# What the example config's `os.environ/` references need, as a deployment provides it.
EXAMPLE_ENV = {
    "OPENAI_API_KEY": "sk-example",
    "PROXY_API_KEY": "proxy-key-example-0123456789",
    "PROXY_ADMIN_KEY": "proxy-admin-key-example-0123456789",
}


def secret_refs(config: Path) -> set[str]:
    """Environment variables the config's `os.environ/VAR` references need."""
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    auth = data.get("auth") or {}
    values = [
        *(v for entry in data.get("model_list", []) for v in entry["litellm_params"].values()),
        *(entry.get("key") for entry in [*auth.get("keys", []), *auth.get("admin_keys", [])]),
    ]
    return {
        value.removeprefix("os.environ/")
        for value in values
        if isinstance(value, str) and value.startswith("os.environ/")
    }


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path or a parent wins."""

    def regex(pattern: str) -> re.Pattern[str]:
        parts = []
        for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern.strip("/")):
            parts.append(
                {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                    token, re.escape(token)
                )
            )
        return re.compile("".join(parts) + r"\Z")

    pieces = PurePosixPath(path).parts
    prefixes = ["/".join(pieces[: index + 1]) for index in range(len(pieces))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        compiled = regex(pattern.removeprefix("!"))
        if any(compiled.match(prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


# --- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def only(instructions: list[Instruction], keyword: str) -> Instruction:
    found = [item for item in instructions if item.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword} in the Dockerfile, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def docker_env(dockerfile: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in dockerfile:
        if item.keyword == "ENV":
            env |= env_pairs(item.args)
    return env


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    (doc,) = yaml_docs(COMPOSE)
    return doc


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def k8s() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.y*ml")):
        for doc in yaml_docs(path):
            assert isinstance(doc, dict), f"{path.name}: every document must be a mapping"
            docs.append(doc)
    assert docs, "no manifests in deploy/k8s"
    return docs


def kind(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == name]


def named(docs: list[dict[str, Any]], kind_name: str, name: str) -> dict[str, Any]:
    found = [doc for doc in kind(docs, kind_name) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind_name} named {name}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def proxy_deployment(k8s: list[dict[str, Any]]) -> dict[str, Any]:
    return named(k8s, "Deployment", "context-proxy")


@pytest.fixture(scope="module")
def proxy_container(proxy_deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = proxy_deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.fixture(scope="module")
def proxy_service(k8s: list[dict[str, Any]]) -> dict[str, Any]:
    return named(k8s, "Service", "context-proxy")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The real app (disk store in a temp dir), to ask which paths it serves (keyless, so
    by a loopback name, as it answers no other)."""
    store = tmp_path_factory.mktemp("deploy-sessions")
    settings = load_settings(None, environ={"CONTEXT_PROXY_SESSION_PATH": str(store)})
    with TestClient(create_app(settings), base_url="http://localhost") as test_client:
        yield test_client


def assert_served(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text}"


# --- Dockerfile -----------------------------------------------------------------------


def test_dockerfile_base_user_and_port(dockerfile: list[Instruction]) -> None:
    assert only(dockerfile, "FROM").args.startswith("python:3.11-slim")
    user = only(dockerfile, "USER").args
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER must be a numeric non-root uid: {user}"
    exposed = [int(port.split("/")[0]) for port in only(dockerfile, "EXPOSE").args.split()]
    assert exposed == [PORT]


def test_dockerfile_environment(docker_env: dict[str, str]) -> None:
    assert docker_env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert docker_env["CONTEXT_PROXY_SERVER_HOST"] == "0.0.0.0"
    overrides = {k: v for k, v in docker_env.items() if k.startswith(ENV_PREFIX)}
    settings = load_settings(None, environ=overrides)
    assert settings.server.host == "0.0.0.0"


def test_dockerfile_copies_what_pip_install_needs(dockerfile: list[Instruction]) -> None:
    """COPY sources exist, are not in the ignore file, and include what pyproject needs."""
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources: set[str] = set()
    for item in dockerfile:
        if item.keyword not in ("COPY", "ADD"):
            continue
        words = exec_form(item.args) if item.args.startswith("[") else shlex.split(item.args)
        assert not any(word.startswith("--from") for word in words), "single-stage build"
        *copied, _destination = [word for word in words if not word.startswith("--")]
        for source in copied:
            path = ROOT / source
            assert path.exists(), f"COPY source {source} does not exist in the repository"
            files = [path] if path.is_file() else list(path.rglob("*.py"))
            assert files, f"COPY source {source} is empty"
            for file in files:
                relative = file.relative_to(ROOT).as_posix()
                assert not ignored(relative, patterns), f"{relative} is in the dockerignore"
            sources.add(PurePosixPath(source).as_posix().rstrip("/"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed = {"pyproject.toml", pyproject["project"]["readme"]}
    needed |= {
        pattern.rstrip("*")
        for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert needed <= sources, f"the image build misses {needed - sources}"
    install = [
        item.args for item in dockerfile if item.keyword == "RUN" and "pip install" in item.args
    ]
    assert "deploy/requirements.lock" in sources, "the image installs the locked dependencies"
    assert "--require-hashes -r requirements.lock" in install[0]
    assert "--no-deps" in install[1] and install[1].rstrip().split(" && ")[0].endswith(" .")


def test_dockerfile_command_and_config(
    dockerfile: list[Instruction], docker_env: dict[str, str]
) -> None:
    command = exec_form(only(dockerfile, "CMD").args)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert command[0] in pyproject["project"]["scripts"]
    assert command[1] == "serve"
    config = command[command.index("--config") + 1]
    copies = [item.args.split() for item in dockerfile if item.keyword == "COPY"]
    assert ["deploy/config.yaml", config] in copies, "the example config is baked at --config"
    volumes = exec_form(only(dockerfile, "VOLUME").args)
    assert docker_env["CONTEXT_PROXY_SESSION_PATH"] in volumes


def test_dockerfile_healthcheck(dockerfile: list[Instruction], client: TestClient) -> None:
    check = only(dockerfile, "HEALTHCHECK").args
    assert " CMD " in f" {check} " and "curl" not in check and "python" in check
    (url,) = urls_in(check)
    parts = urlsplit(url)
    assert parts.port == PORT
    assert parts.path == "/health/live"
    assert_served(client, parts.path)


# --- config.yaml ----------------------------------------------------------------------


def test_example_config_loads() -> None:
    settings = load_settings(CONFIG, environ=EXAMPLE_ENV)
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == PORT
    assert settings.server.workers == 1
    assert settings.session.store == "redis"
    assert urlsplit(settings.session.redis_url).hostname == "redis"
    assert settings.model_names(), "the example config lists models"
    for entry in settings.model_list:
        assert entry.litellm_params.get("api_key") == "os.environ/OPENAI_API_KEY"


@pytest.mark.parametrize("variable", sorted(EXAMPLE_ENV))
def test_example_config_needs_its_keys(variable: str) -> None:
    """The secret references are real: without one the proxy refuses to start."""
    environ = {name: value for name, value in EXAMPLE_ENV.items() if name != variable}
    with pytest.raises(ConfigError, match=variable):
        load_settings(CONFIG, environ=environ)


@pytest.mark.parametrize("config", [CONFIG, K8S / "10-configmap.yaml"], ids=["compose", "k8s"])
def test_every_deploy_file_turns_keys_on(config: Path, tmp_path: Path) -> None:
    """Deployed, the proxy listens on every interface: it must never serve without keys,
    and the keys come from the environment (a Secret), not from the file."""
    text = config.read_text(encoding="utf-8")
    if config.parent == K8S:
        (config_map,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "ConfigMap"]
        text = config_map["data"]["config.yaml"]
    raw = yaml.safe_load(text)
    for entry in [*raw["auth"]["keys"], *raw["auth"]["admin_keys"]]:
        assert entry["key"].startswith("os.environ/"), "a key in a file is a leaked key"
    path = tmp_path / "config.yaml"
    path.write_text(text)
    settings = load_settings(path, environ=EXAMPLE_ENV)
    assert settings.auth.mode == "keys" and settings.auth.keys and settings.auth.admin_keys
    assert not settings.auth.allow_anonymous
    assert anonymous_refusal(settings, settings.server.host) is None
    anonymous = settings.model_copy(update={"auth": AuthSettings()})
    assert anonymous_refusal(anonymous, settings.server.host) is not None


# --- docker-compose -------------------------------------------------------------------


def test_compose_has_the_stack(services: dict[str, dict[str, Any]]) -> None:
    assert {"proxy", "redis", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        depends = service.get("depends_on", [])
        for other in depends if isinstance(depends, list) else depends.keys():
            assert other in services, f"{name} depends on unknown service {other}"


def test_compose_build_points_at_the_dockerfile(services: dict[str, dict[str, Any]]) -> None:
    build = services["proxy"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE


def test_compose_mounts_exist(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for mount in compose_mounts(service):
            if is_bind(mount):
                assert (DEPLOY / mount.source).exists(), f"{name}: {mount.source} does not exist"
            else:
                assert mount.source in declared, f"{name}: volume {mount.source} not declared"


def test_compose_proxy(
    services: dict[str, dict[str, Any]],
    dockerfile: list[Instruction],
    docker_env: dict[str, str],
    client: TestClient,
) -> None:
    proxy = services["proxy"]
    assert container_ports(proxy) == {PORT: PORT}
    mounts = {mount.target: mount for mount in compose_mounts(proxy)}
    command = exec_form(only(dockerfile, "CMD").args)
    config = mounts[command[command.index("--config") + 1]]
    assert (DEPLOY / config.source).resolve() == CONFIG and config.read_only
    data = mounts[docker_env["CONTEXT_PROXY_SESSION_PATH"]]
    assert not is_bind(data)
    depends = proxy["depends_on"]
    assert "redis" in depends
    test = proxy["healthcheck"]["test"]
    (url,) = urls_in(" ".join(test) if isinstance(test, list) else test)
    assert urlsplit(url).port == PORT
    assert urlsplit(url).path in ("/health/live", "/health/ready")
    assert_served(client, urlsplit(url).path)


def test_compose_environment_is_valid(services: dict[str, dict[str, Any]]) -> None:
    env = compose_environment(services["proxy"])
    assert secret_refs(CONFIG) <= set(env), "compose must pass the config's secrets"
    assert "CONTEXT_PROXY_SESSION_TENANT_SECRET" in env
    overrides = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)}
    for name, value in overrides.items():
        load_settings(None, environ={name: value})
    settings = load_settings(CONFIG, environ=env)
    assert settings.session.tenant_secret == PLACEHOLDER


def test_compose_redis_matches_the_config(services: dict[str, dict[str, Any]]) -> None:
    url = urlsplit(load_settings(CONFIG, environ=EXAMPLE_ENV).session.redis_url)
    assert url.hostname in services
    redis = services[url.hostname]
    assert str(redis["image"]).split(":")[0] == "redis"
    assert (url.port or 6379) == 6379, "compose's Redis listens on its default port"
    command = redis["command"]
    words = command if isinstance(command, list) else shlex.split(command)
    assert words[words.index("--maxmemory-policy") + 1] == "noeviction"
    assert words[words.index("--appendonly") + 1] == "yes"
    assert any(mount.target == "/data" and not is_bind(mount) for mount in compose_mounts(redis))


def test_prometheus_scrapes_the_proxy(
    services: dict[str, dict[str, Any]], client: TestClient
) -> None:
    prometheus = services["prometheus"]
    assert str(prometheus["image"]).startswith("prom/prometheus")
    assert 9090 in container_ports(prometheus)
    mounts = {mount.target: mount for mount in compose_mounts(prometheus)}
    config = mounts["/etc/prometheus/prometheus.yml"]
    assert (DEPLOY / config.source).resolve() == PROMETHEUS

    (scrape,) = yaml_docs(PROMETHEUS)
    jobs = scrape["scrape_configs"]
    proxy_jobs = [
        job
        for job in jobs
        for static in job.get("static_configs", [])
        for target in static["targets"]
        if target.split(":")[0] == "proxy"
    ]
    assert len(proxy_jobs) == 1
    (job,) = proxy_jobs
    assert job.get("scrape_interval", scrape.get("global", {}).get("scrape_interval")) == "15s"
    path = job.get("metrics_path", "/metrics")
    assert path == "/metrics"
    for static in job["static_configs"]:
        for target in static["targets"]:
            host, _, port = target.partition(":")
            assert host in services, f"scrape target {target} is not a compose service"
            assert int(port) == PORT
    assert_served(client, path)


def test_grafana_mounts(services: dict[str, dict[str, Any]]) -> None:
    grafana = services["grafana"]
    assert str(grafana["image"]).startswith("grafana/grafana")
    assert 3000 in container_ports(grafana)
    mounts = {(DEPLOY / m.source).resolve(): m for m in compose_mounts(grafana) if is_bind(m)}
    provisioning = mounts[ROOT / "grafana" / "provisioning"]
    dashboards = mounts[ROOT / "grafana" / "dashboards"]
    assert provisioning.target == "/etc/grafana/provisioning" and provisioning.read_only
    assert dashboards.target == "/var/lib/grafana/dashboards" and dashboards.read_only


def test_grafana_dashboard_provider_path(services: dict[str, dict[str, Any]]) -> None:
    mounts = {m.source: m.target for m in compose_mounts(services["grafana"]) if is_bind(m)}
    target = PurePosixPath(mounts["../grafana/dashboards"])
    (providers,) = yaml_docs(GRAFANA_DASHBOARD_PROVIDERS)
    assert providers["providers"], "no dashboard provider"
    for provider in providers["providers"]:
        path = PurePosixPath(provider["options"]["path"])
        assert path == target or target in path.parents, f"{path} is not mounted ({target})"


def test_grafana_datasource_points_at_prometheus(services: dict[str, dict[str, Any]]) -> None:
    files = sorted(GRAFANA_DATASOURCES.glob("*.y*ml"))
    assert files, f"no Grafana datasource in {GRAFANA_DATASOURCES}"
    urls = [
        source["url"]
        for path in files
        for doc in yaml_docs(path)
        for source in doc.get("datasources", [])
        if source.get("type") == "prometheus"
    ]
    assert urls, "no Prometheus datasource"
    for url in urls:
        parts = urlsplit(url)
        assert parts.hostname in services, f"{url}: not a compose service"
        assert parts.port in container_ports(services[parts.hostname])


# --- Kubernetes -----------------------------------------------------------------------


def test_k8s_manifests_are_well_formed(k8s: list[dict[str, Any]]) -> None:
    (namespace,) = kind(k8s, "Namespace")
    name = namespace["metadata"]["name"]
    for doc in k8s:
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), doc
        if doc["kind"] in NAMESPACED:
            assert doc["metadata"].get("namespace") == name, doc["metadata"]["name"]
    assert not kind(k8s, "Secret"), "secrets are created with kubectl, never committed"


def test_k8s_configmap_is_the_example_config(k8s: list[dict[str, Any]], tmp_path: Path) -> None:
    (config_map,) = kind(k8s, "ConfigMap")
    content = config_map["data"]["config.yaml"]
    assert yaml.safe_load(content) == yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    path = tmp_path / "config.yaml"
    path.write_text(content, encoding="utf-8")
    assert load_settings(path, environ=EXAMPLE_ENV).server.port == PORT


def test_k8s_deployment(
    k8s: list[dict[str, Any]],
    proxy_deployment: dict[str, Any],
    proxy_container: dict[str, Any],
    dockerfile: list[Instruction],
    docker_env: dict[str, str],
    services: dict[str, dict[str, Any]],
) -> None:
    spec = proxy_deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert proxy_container["image"] == services["proxy"]["image"]
    assert proxy_container["ports"] == [{"name": "http", "containerPort": PORT}]

    uid = int(only(dockerfile, "USER").args.split(":")[0])
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == uid
    assert proxy_container["securityContext"]["allowPrivilegeEscalation"] is False

    resources = proxy_container["resources"]
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[bound]), bound

    # The config file is mounted from the ConfigMap exactly where --config reads it.
    command = proxy_container.get("args") or exec_form(only(dockerfile, "CMD").args)
    config_path = PurePosixPath(command[command.index("--config") + 1])
    (config_map,) = kind(k8s, "ConfigMap")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounted = [
        m
        for m in proxy_container["volumeMounts"]
        if volumes[m["name"]].get("configMap", {}).get("name") == config_map["metadata"]["name"]
    ]
    assert len(mounted) == 1
    assert PurePosixPath(mounted[0]["mountPath"]) / config_path.name == config_path
    assert config_path.name in config_map["data"]

    # A read-only root file system needs writable volumes for the session path and /tmp.
    if proxy_container["securityContext"].get("readOnlyRootFilesystem"):
        writable = {
            m["mountPath"]
            for m in proxy_container["volumeMounts"]
            if "emptyDir" in volumes[m["name"]] or "persistentVolumeClaim" in volumes[m["name"]]
        }
        assert {docker_env["CONTEXT_PROXY_SESSION_PATH"], "/tmp"} <= writable


def test_k8s_environment_is_valid(
    k8s: list[dict[str, Any]], proxy_container: dict[str, Any], tmp_path: Path
) -> None:
    env = k8s_environment(proxy_container)
    assert secret_refs(CONFIG) <= set(env), "the Deployment must pass the config's secrets"
    for item in proxy_container["env"]:
        if item["name"] in secret_refs(CONFIG) | {"CONTEXT_PROXY_SESSION_TENANT_SECRET"}:
            assert "secretKeyRef" in item.get("valueFrom", {}), f"{item['name']}: from a Secret"
    assert "PROMETHEUS_MULTIPROC_DIR" not in env
    for name, value in env.items():
        if name.startswith(ENV_PREFIX):
            load_settings(None, environ={name: value})
    (config_map,) = kind(k8s, "ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"], encoding="utf-8")
    settings = load_settings(path, environ=env)
    assert settings.server.workers == 1, "one worker per pod: scale with replicas"
    assert settings.session.tenant_secret == PLACEHOLDER, "replicas must share the tenant key"
    assert settings.session.store == "redis", "replicas must share the session store"


def test_k8s_probes(proxy_container: dict[str, Any], client: TestClient) -> None:
    named_ports = {port["name"]: port["containerPort"] for port in proxy_container["ports"]}
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe not in proxy_container:
            assert probe == "startupProbe", f"{probe} is missing"
            continue
        action = proxy_container[probe]["httpGet"]
        port = action["port"]
        assert named_ports.get(port, port) == PORT, f"{probe} port {port}"
        paths[probe] = action["path"]
        assert_served(client, action["path"])
    assert paths["livenessProbe"] == "/health/live"
    assert paths["readinessProbe"] == "/health/ready"


def test_k8s_service(
    proxy_deployment: dict[str, Any], proxy_service: dict[str, Any], proxy_container: dict[str, Any]
) -> None:
    labels = proxy_deployment["spec"]["template"]["metadata"]["labels"]
    spec = proxy_service["spec"]
    assert spec["selector"].items() <= labels.items()
    (port,) = spec["ports"]
    assert port["name"] == "http" and port["port"] == PORT
    named_ports = {p["name"]: p["containerPort"] for p in proxy_container["ports"]}
    target = port.get("targetPort", port["port"])
    assert named_ports.get(target, target) == PORT


def test_k8s_autoscaler(k8s: list[dict[str, Any]], proxy_deployment: dict[str, Any]) -> None:
    (hpa,) = kind(k8s, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    target = spec["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", proxy_deployment["metadata"]["name"])
    assert proxy_deployment["spec"]["replicas"] <= spec["minReplicas"] <= spec["maxReplicas"]
    resources = [m["resource"]["name"] for m in spec["metrics"] if m["type"] == "Resource"]
    assert resources == ["cpu"]


def test_k8s_service_monitor(
    k8s: list[dict[str, Any]], proxy_service: dict[str, Any], client: TestClient
) -> None:
    (monitor,) = kind(k8s, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= proxy_service["metadata"]["labels"].items()
    namespaces = spec.get("namespaceSelector", {}).get("matchNames")
    assert namespaces in (None, [proxy_service["metadata"]["namespace"]])
    service_ports = {port["name"] for port in proxy_service["spec"]["ports"]}
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] == "http" and endpoint["port"] in service_ports
    assert endpoint["path"] == "/metrics"
    assert_served(client, endpoint["path"])


def test_k8s_redis_matches_the_config(
    k8s: list[dict[str, Any]], proxy_deployment: dict[str, Any]
) -> None:
    url = urlsplit(load_settings(CONFIG, environ=EXAMPLE_ENV).session.redis_url)
    service = named(k8s, "Service", str(url.hostname))
    assert service["metadata"]["namespace"] == proxy_deployment["metadata"]["namespace"]
    assert (url.port or 6379) in [port["port"] for port in service["spec"]["ports"]]
    selected = [
        d
        for d in kind(k8s, "Deployment") + kind(k8s, "StatefulSet")
        if service["spec"]["selector"].items()
        <= d["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert len(selected) == 1, "the redis Service selects exactly one workload"
    (container,) = selected[0]["spec"]["template"]["spec"]["containers"]
    assert container["image"].split(":")[0] == "redis"
    args = container.get("args", [])
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--appendonly") + 1] == "yes"
