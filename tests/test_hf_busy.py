"""source=hf when the Hub answers that it is busy or down (429, 503; an attack found
these): asked again after its Retry-After, up to source.retries times, and if it never
answers, one line that says to run again later (not 'run once with network': the network
was there)."""

from __future__ import annotations

import time

import pytest
import test_hf_source as hf
from helpers import assert_one_line_error
from test_hf_source import hf_cli, jsonl, texts

pytest.importorskip("huggingface_hub", reason="source=hf needs pip install '.[hub]'")
_clean_env, hub = hf._clean_env, hf.hub  # the stand-in Hub and its CDN, the HF cache in tmp


def _refusing(hub, monkeypatch, status: int, times: int) -> list[str]:
    """The Hub answers `status` (Retry-After: 1) to its first `times` requests."""
    handler = hub._httpd.RequestHandlerClass
    answer, asked = handler._answer, []

    def busy(self, head):
        asked.append(self.path)
        if len(asked) <= times:
            return hf._send(self, status, {"error": "busy"}, head, headers={"Retry-After": "1"})
        return answer(self, head)

    monkeypatch.setattr(handler, "_answer", busy)
    return asked


@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_answer_is_asked_again(status, hub, tmp_path, monkeypatch):
    hub.push("t/busy", {"data/train.jsonl": jsonl(texts("x", 3))})
    asked = _refusing(hub, monkeypatch, status, times=2)
    result = hf_cli(tmp_path, hub, "t/busy", "out_dir=out")
    assert result.returncode == 0, result.stderr
    assert len(asked) > 2


@pytest.mark.parametrize("status", [429, 503])
def test_a_hub_that_stays_busy_says_run_again_later(status, hub, tmp_path, monkeypatch):
    hub.push("t/busy", {"data/train.jsonl": jsonl(texts("x", 3))})
    asked = _refusing(hub, monkeypatch, status, times=10**6)
    result = hf_cli(tmp_path, hub, "t/busy", "out_dir=out", "source.retries=1")
    assert_one_line_error(result, f"HTTP {status}, 2 attempts", "run again later")
    assert "with network" not in result.stderr
    assert len(asked) == 2
    assert not (tmp_path / "out").exists()


def test_a_download_that_stalls_is_given_up_at_the_deadline(hub, tmp_path, monkeypatch):
    """A CDN that sends a byte every half second: each byte restarts huggingface_hub's
    timeout, so only source.deadline ends the run (before: it went on for ever)."""
    body = hf.parquet(texts("slow", 5))
    hub.push("t/slow", {"data/train-00000-of-00001.parquet": body})
    handler = hub.cdn._httpd.RequestHandlerClass

    def trickle(self, head):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for i in range(0 if head else len(body)):
            try:
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
            except OSError:  # the client went away
                return
            time.sleep(0.5)

    monkeypatch.setattr(handler, "_answer", trickle)
    started = time.monotonic()
    result = hf_cli(tmp_path, hub, "t/slow", "out_dir=out", "source.deadline=3")
    assert_one_line_error(result, "train-00000-of-00001.parquet", "source.deadline=3 s")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["cut short", "redirect loop"])
def test_a_broken_answer_is_one_line_with_a_fix_that_fits(how, hub, tmp_path, monkeypatch):
    """A CDN that says 10 GB and closes after 100 bytes, or redirects to itself: one line
    whose fix fits (before: 'run once with network', and no fix at all)."""
    body = hf.parquet(texts("x", 5))
    hub.push("t/broken", {"data/train-00000-of-00001.parquet": body})

    def answer(self, head):
        self.send_response(302 if how == "redirect loop" else 200)
        self.send_header("Location", self.path)
        self.send_header("Content-Length", "0" if how == "redirect loop" else str(10**10))
        self.end_headers()
        if not head and how == "cut short":
            self.wfile.write(body[:100])
            self.wfile.flush()
            self.close_connection = True

    monkeypatch.setattr(hub.cdn._httpd.RequestHandlerClass, "_answer", answer)
    result = hf_cli(tmp_path, hub, "t/broken", "out_dir=out")
    fix = "run again (the download resumes)" if how == "cut short" else "check source.endpoint"
    assert_one_line_error(result, "train-00000-of-00001.parquet", fix)
    assert "with network" not in result.stderr
