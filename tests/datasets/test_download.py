"""Downloads from a real HTTP server on 127.0.0.1: resume, verification, extraction, skip."""

from __future__ import annotations

import http.server
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from tests.helpers.data_trees import build_official

from skinet.datasets.download import (
    DownloadError,
    archive_urls,
    download_dataset,
    download_file,
)
from skinet.datasets.layouts import ISIC2017_FOLDERS
from skinet.datasets.registry import get_layout
from skinet.datasets.verify import verify_dataset


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler plus single ``bytes=N-`` ranges; logs requests for the tests."""

    requests: list[tuple[str, str | None]] = []

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        range_header = self.headers.get("Range")
        type(self).requests.append((self.path, range_header))
        path = Path(self.translate_path(self.path))
        if not range_header or not path.is_file():
            return super().do_GET()
        data = path.read_bytes()
        start = int(range_header.removeprefix("bytes=").split("-")[0])
        if start >= len(data):
            self.send_response(416)
            self.end_headers()
            return
        self.send_response(206)
        self.send_header("Content-Type", "application/zip")
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[start:])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A threaded HTTP server on a free port serving ``tmp_path/www``."""
    www = tmp_path / "www"
    www.mkdir()
    RangeHandler.requests = []
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(RangeHandler, directory=str(www))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", www
    finally:
        httpd.shutdown()
        httpd.server_close()


def _publish_isic2017(tmp_path: Path, www: Path) -> None:
    """Zip a tiny ISIC 2017 tree the way the official archives are packed (one top folder)."""
    tree = build_official(tmp_path / "src", ISIC2017_FOLDERS, {"train": 3, "val": 2, "test": 2})
    official = get_layout("isic2017").download
    assert official is not None
    year_dir = www / official.subfolder
    year_dir.mkdir()
    for archive in official.archives:
        with zipfile.ZipFile(year_dir / archive.filename, "w") as zf:
            for path in sorted((tree / archive.folder).iterdir()):
                zf.write(path, f"{archive.folder}/{path.name}")


def _first_isic2017_archive() -> str:
    official = get_layout("isic2017").download
    assert official is not None
    return official.archives[0].filename


def test_download_extract_verify_and_skip(tmp_path: Path, server) -> None:
    base_url, www = server
    _publish_isic2017(tmp_path, www)
    dest = download_dataset("isic2017", tmp_path / "data", base_url=base_url, show_progress=False)
    assert verify_dataset(dest, "isic2017") == []
    assert not (dest / "downloads").exists()
    count = len(RangeHandler.requests)
    download_dataset("isic2017", dest, base_url=base_url, show_progress=False)
    assert len(RangeHandler.requests) == count  # everything was complete: nothing fetched


def test_resume_after_partial_file(tmp_path: Path, server) -> None:
    base_url, www = server
    payload = bytes(range(256)) * 400
    (www / "blob.zip").write_bytes(payload)
    dest = tmp_path / "dl" / "blob.zip"
    dest.parent.mkdir()
    dest.with_name("blob.zip.part").write_bytes(payload[:30000])
    download_file(f"{base_url}/blob.zip", dest)
    assert dest.read_bytes() == payload
    assert RangeHandler.requests[-1] == ("/blob.zip", "bytes=30000-")
    assert not dest.with_name("blob.zip.part").exists()


def test_sha256_mismatch(tmp_path: Path, server) -> None:
    base_url, www = server
    (www / "blob.zip").write_bytes(b"abc")
    with pytest.raises(DownloadError, match="SHA-256"):
        download_file(f"{base_url}/blob.zip", tmp_path / "blob.zip", sha256="0" * 64)
    assert not (tmp_path / "blob.zip").exists()


def test_corrupted_archive_is_a_clear_error(tmp_path: Path, server) -> None:
    base_url, www = server
    _publish_isic2017(tmp_path, www)
    first = www / "2017" / _first_isic2017_archive()
    data = bytearray(first.read_bytes())
    with zipfile.ZipFile(first) as zf:
        info = zf.infolist()[0]
    offset = info.header_offset + 30 + len(info.filename) + 5  # inside the first member's data
    data[offset] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(DownloadError, match=r"corrupt \(bad CRC in ISIC-2017_Training_Data/"):
        download_dataset("isic2017", tmp_path / "data", base_url=base_url, show_progress=False)


def test_truncated_archive_is_a_clear_error(tmp_path: Path, server) -> None:
    base_url, www = server
    _publish_isic2017(tmp_path, www)
    first = www / "2017" / _first_isic2017_archive()
    first.write_bytes(first.read_bytes()[:-40])
    with pytest.raises(DownloadError, match="not a valid zip archive"):
        download_dataset("isic2017", tmp_path / "data", base_url=base_url, show_progress=False)


def test_http_error_and_url_table(tmp_path: Path, server) -> None:
    base_url, _ = server
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_file(f"{base_url}/missing.zip", tmp_path / "x.zip")
    urls = [url for url, _ in archive_urls("isic2018")]
    assert (
        urls[0]
        == "https://isic-challenge-data.s3.amazonaws.com/2018/ISIC2018_Task1-2_Training_Input.zip"
    )


def test_cli_download_defaults_to_where_main_config_looks(
    tmp_path: Path, server, monkeypatch
) -> None:
    from skinet.cli.main import main

    base_url, www = server
    _publish_isic2017(tmp_path, www)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["data", "download", "isic2017", "--base-url", base_url]) == 0
    config = Path(__file__).resolve().parents[2] / "configs" / "main_config.yaml"
    assert main(["data", "verify", "--config", str(config)]) == 0  # found in data/ISIC2017
