"""The landing zone's botocore clients: botocore's data files read once per process, the
credentials found anew for each client."""

from __future__ import annotations

import pytest

from dblog_worker.landing.s3_objects import S3Location, make_client, new_session

LOCATION = S3Location(bucket="landing", endpoint="http://127.0.0.1:9", path_style=True)


def test_sessions_share_one_loader_of_botocores_data() -> None:
    first, second = new_session(), new_session()
    assert first is not second
    assert first.get_component("data_loader") is second.get_component("data_loader")


def test_each_client_finds_the_credentials_of_its_time(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    first = make_client(LOCATION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "second-secret")
    second = make_client(LOCATION)
    assert first._request_signer._credentials.access_key == "first-key"
    assert second._request_signer._credentials.access_key == "second-key"
