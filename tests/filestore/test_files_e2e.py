"""The Files API end to end: the official openai SDK → a real router process
(uvicorn, its own SQLite DB and var dir) → the local-filesystem storage.

One blocking-mode router with small limits serves every test; each test
issues its own keys with `manage.py createapikey`, so quotas never meet.
"""

from __future__ import annotations

import io
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import openai
import pytest

from tests.keys.e2e import create_key, sdk
from tests.support.routerproc import RouterProc, wait_until

MAX_FILE = 64 * 1024
PER_KEY = 200 * 1024

CONFIG = """
backends: []
health: {enabled: false}
api_keys: {mode: blocking}
"""


@pytest.fixture(scope="module")
def router():
    proc = RouterProc(
        CONFIG,
        env={"ROUTER_FILES_MAX_BYTES": str(MAX_FILE), "ROUTER_FILES_MAX_BYTES_PER_KEY": str(PER_KEY)},
    ).start()
    yield proc
    proc.stop()


def upload(client: openai.OpenAI, data: bytes, name: str = "data.jsonl", purpose: str = "batch"):
    return client.files.create(file=(name, io.BytesIO(data), "application/jsonl"), purpose=purpose)


def test_upload_retrieve_download_delete_round_trip(router):
    """A file comes back byte for byte, with OpenAI's object shape, and is gone once deleted."""
    client = sdk(router, create_key(router))
    data = os.urandom(50_000)
    made = upload(client, data, name="train.jsonl", purpose="user_data")
    assert made.id.startswith("file-") and made.object == "file"
    assert (made.bytes, made.filename, made.purpose, made.status) == (50_000, "train.jsonl", "user_data", "processed")
    got = client.files.retrieve(made.id)
    assert got.model_dump() == made.model_dump()
    assert client.files.content(made.id).read() == data
    stored = list((Path(router.dir) / "files").iterdir())
    assert [p.name for p in stored] == [made.id]
    gone = client.files.delete(made.id)
    assert (gone.id, gone.deleted, gone.object) == (made.id, True, "file")
    with pytest.raises(openai.NotFoundError) as err:
        client.files.retrieve(made.id)
    assert err.value.body["code"] == "file_not_found"
    assert not (Path(router.dir) / "files" / made.id).exists()


def test_another_key_gets_404_for_every_operation(router):
    """A file belongs to the key that uploaded it: another key can neither see,
    read nor delete it, and its list does not show it."""
    owner, other = sdk(router, create_key(router)), sdk(router, create_key(router))
    made = upload(owner, b'{"a": 1}\n')
    for call in (other.files.retrieve, other.files.content, other.files.delete):
        with pytest.raises(openai.NotFoundError):
            call(made.id)
    assert [f.id for f in other.files.list()] == []
    assert owner.files.retrieve(made.id).id == made.id


def test_list_pages_with_limit_after_order_and_purpose(router):
    """The SDK's cursor paging walks every file exactly once, in either order;
    `purpose` filters."""
    client = sdk(router, create_key(router))
    ids = [upload(client, f"{i}\n".encode()).id for i in range(5)]
    vision = upload(client, b"img", name="a.png", purpose="vision").id
    asc = [f.id for f in client.files.list(purpose="batch", limit=2, order="asc")]  # auto-paginates
    assert sorted(asc) == sorted(ids) and len(asc) == 5
    desc = [f.id for f in client.files.list(purpose="batch", limit=2, order="desc")]
    assert desc == list(reversed(asc))
    page = client.files.list(limit=2)
    assert page.has_more is True and len(page.data) == 2
    assert [f.id for f in client.files.list(purpose="vision")] == [vision]


def test_file_over_the_per_file_limit_is_413_and_not_stored(router):
    client = sdk(router, create_key(router))
    with pytest.raises(openai.APIStatusError) as err:
        upload(client, b"x" * (MAX_FILE + 1))
    assert err.value.status_code == 413
    assert err.value.body["code"] == "file_too_large"
    assert str(MAX_FILE) in err.value.body["message"]
    assert list(client.files.list()) == []


def test_body_past_the_limit_is_refused_before_it_is_read(router):
    """A declared length far past the room is refused from the head alone."""
    key = create_key(router)
    with httpx.Client(timeout=30) as http:
        r = http.post(
            router.url + "/v1/files",
            headers={"authorization": f"Bearer {key}"},
            files={"file": ("big.bin", b"y" * (3 * MAX_FILE))},
            data={"purpose": "batch"},
        )
    assert r.status_code == 413 and r.json()["error"]["code"] == "file_too_large"


def test_per_key_total_is_413_quota_exceeded(router):
    """Files up to the key's total are accepted; the one past it is refused,
    and deleting one makes room again."""
    client = sdk(router, create_key(router))
    chunk = b"z" * (MAX_FILE - 10)
    made = [upload(client, chunk) for _ in range(PER_KEY // len(chunk))]
    with pytest.raises(openai.APIStatusError) as err:
        upload(client, chunk)
    assert err.value.status_code == 413 and err.value.body["code"] == "file_quota_exceeded"
    client.files.delete(made[0].id)
    assert upload(client, chunk).bytes == len(chunk)
    # Another key's total is its own.
    assert upload(sdk(router, create_key(router)), chunk).bytes == len(chunk)


def test_a_key_holding_its_most_files_is_413_count_exceeded_before_the_body(router_factory):
    """ROUTER_FILES_MAX_PER_KEY (2 here): the third upload is refused from the
    head, before its body is read; deleting one makes room again."""
    proc = router_factory(CONFIG, env={"ROUTER_FILES_MAX_PER_KEY": "2"})
    key = create_key(proc)
    client = sdk(proc, key)
    made = [upload(client, b"x"), upload(client, b"y")]
    with pytest.raises(openai.APIStatusError) as err:
        upload(client, b"z")
    assert err.value.status_code == 413 and err.value.body["code"] == "file_count_exceeded"
    assert "holds 2 files; the most is 2" in err.value.body["message"]
    # Refused from the head: a body that never comes is not waited for.
    url = httpx.URL(proc.url)
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(f"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                     "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 1000000\r\n\r\n--b\r\n"
                     .encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
    client.files.delete(made[0].id)
    assert upload(client, b"z").bytes == 1
    assert [f.id for f in client.files.list()] != [] and len(list(client.files.list())) == 2


def test_bad_requests_are_openai_shaped_400s(router):
    client = sdk(router, create_key(router))
    with pytest.raises(openai.BadRequestError) as err:
        upload(client, b"x", purpose="nonsense")
    assert err.value.body["param"] == "purpose"
    with pytest.raises(openai.BadRequestError) as err:
        client.files.list(limit=0)
    assert err.value.body["param"] == "limit"
    key = client.api_key
    r = httpx.post(
        router.url + "/v1/files",
        headers={"authorization": f"Bearer {key}"},
        data={"purpose": "batch"},
        files={"other": ("a", b"1")},
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"


def test_without_a_key_blocking_mode_is_401(router):
    with pytest.raises(openai.AuthenticationError):
        sdk(router, "sk-unknown-" + uuid.uuid4().hex).files.list()
    r = httpx.get(router.url + "/v1/files", timeout=30)
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"


def test_unknown_path_and_method_are_openai_shaped(router):
    key = create_key(router)
    h = {"authorization": f"Bearer {key}"}
    r = httpx.put(router.url + "/v1/files", headers=h, timeout=30)
    assert r.status_code == 405 and "POST" in r.headers["allow"]
    r = httpx.get(router.url + "/v1/files/a/b/c", headers=h, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["type"]


def test_open_mode_anonymous_callers_share_one_pool_apart_from_keys(router_factory):
    """In open mode a caller with no valid key is anonymous: the anonymous
    callers share one pool of files, which no key sees."""
    proc = router_factory("backends: []\nhealth: {enabled: false}\n")
    anon = sdk(proc, "EMPTY")
    made = upload(anon, b"shared\n")
    assert sdk(proc, "sk-dummy").files.content(made.id).read() == b"shared\n"
    keyed = sdk(proc, create_key(proc))
    with pytest.raises(openai.NotFoundError):
        keyed.files.retrieve(made.id)


def test_a_file_of_many_slices_round_trips(router_factory):
    """A file larger than the door's 1 MiB slices (and Django's in-memory
    upload size) is spooled, stored and sent back whole."""
    proc = router_factory("backends: []\nhealth: {enabled: false}\n")
    client = sdk(proc, "EMPTY")
    data = os.urandom(5 * 1024 * 1024 + 7)
    made = upload(client, data, name="big.bin")
    assert made.bytes == len(data)
    assert client.files.content(made.id).read() == data


def test_an_upload_has_the_files_body_deadline_not_the_chat_one(router_factory):
    """An upload that pauses past ROUTER_BODY_TIMEOUT is still taken within
    ROUTER_FILES_BODY_TIMEOUT; one that pauses past that is a 408."""
    proc = router_factory(
        "backends: []\nhealth: {enabled: false}\n",
        env={"ROUTER_BODY_TIMEOUT": "1", "ROUTER_FILES_BODY_TIMEOUT": "4"},
    )
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def body(pause: float):
        yield head + b"first "
        time.sleep(pause)
        yield b"second" + tail

    headers = {"content-type": f"multipart/form-data; boundary={boundary}", "authorization": "Bearer EMPTY"}
    r = httpx.post(proc.url + "/v1/files", content=body(2.5), headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert sdk(proc, "EMPTY").files.content(r.json()["id"]).read() == b"first second"
    r = httpx.post(proc.url + "/v1/files", content=body(6), headers=headers, timeout=30)
    assert r.status_code == 408 and r.json()["error"]["code"] == "request_timeout"
    assert "4 s" in r.json()["error"]["message"]


def test_uploads_past_the_process_limit_are_503_until_one_ends(router_factory):
    """With ROUTER_FILES_MAX_UPLOADS=1, a second upload while a slow one is
    under way is a 503 too_many_uploads with Retry-After; once the slow one
    ends, uploads are taken again."""
    proc = router_factory("backends: []\nhealth: {enabled: false}\n", env={"ROUTER_FILES_MAX_UPLOADS": "1"})
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.txt"\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    release, begun = threading.Event(), threading.Event()

    def slow_body():
        yield head + b"slow"
        begun.set()  # httpx asks for more once the head and the first bytes are sent
        release.wait(30)
        yield tail

    headers = {"content-type": f"multipart/form-data; boundary={boundary}", "authorization": "Bearer EMPTY"}
    result: list[httpx.Response] = []
    slow = threading.Thread(
        target=lambda: result.append(
            httpx.post(proc.url + "/v1/files", content=slow_body(), headers=headers, timeout=60)
        )
    )
    slow.start()
    try:
        assert begun.wait(30), "the slow upload never started"
        refused = wait_until(
            lambda: (
                (
                    r := httpx.post(proc.url + "/v1/files", content=head + b"quick" + tail, headers=headers, timeout=30)
                ).status_code
                == 503
                and r
            ),
            20,
            what="a second upload to be refused",
        )
        assert refused.json()["error"]["code"] == "too_many_uploads"
        assert refused.headers["retry-after"] == "1"
    finally:
        release.set()
        slow.join(60)
    assert result[0].status_code == 200, result[0].text
    r = httpx.post(proc.url + "/v1/files", content=head + b"after" + tail, headers=headers, timeout=30)
    assert r.status_code == 200 and r.json()["bytes"] == 5


def test_a_chunked_body_past_the_room_is_refused_as_it_arrives(router):
    """No Content-Length to judge by: the bytes are counted as they come and
    the upload is refused once they pass the file's room; nothing is stored."""
    key = create_key(router)
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
    ).encode()

    sent = []

    def body():
        yield head
        for _ in range(400):  # 25 MiB: far more than the socket buffers between us hold
            yield b"q" * MAX_FILE
            sent.append(1)
            time.sleep(0.005)
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {"content-type": f"multipart/form-data; boundary={boundary}", "authorization": f"Bearer {key}"}
    r = httpx.post(router.url + "/v1/files", content=body(), headers=headers, timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == "file_too_large"
    assert len(sent) < 400  # refused while the body was still coming, the rest never read
    assert list(sdk(router, key).files.list()) == []
