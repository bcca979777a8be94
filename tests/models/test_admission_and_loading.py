from pathlib import Path

import pytest
import torch

from specd.core.processors import SamplingPolicy
from specd.errors import ModelLoadError, OutOfMemory, TokenizerMismatch, UsageError
from specd.models.admission import admit
from specd.models.hf.loading import load, resolve_device, resolve_dtype
from tests.hf_helpers import tiny_tokenizer


class FakeTok:
    def __init__(self, vocab, eos=1):
        self._v, self.eos_token_id, self.bos_token_id = vocab, eos, None

    def get_vocab(self):
        return dict(self._v)

    def __len__(self):
        return len(self._v)


def test_same_tokenizer_is_admitted_and_padded_columns_are_masked():
    tok = tiny_tokenizer()
    space = admit(tok, tok, len(tok) + 20, len(tok) + 36)
    assert space.real_vocab == len(tok) and space.width == len(tok) + 20
    policy = SamplingPolicy.build(temperature=1.0, real_vocab=space.real_vocab)
    probs = policy.probabilities(torch.zeros(1, space.width), [policy.initial_state([])])
    assert probs[0, space.real_vocab :].sum() == 0 and abs(probs.sum().item() - 1) < 1e-6


@pytest.mark.parametrize(
    "draft,message",
    [
        (FakeTok({"a": 0, "b": 1, "c": 2}), "2 vs 3 tokens"),
        (FakeTok({"a": 1, "b": 0}), "token 'a' is id 0 in the target and id 1 in the draft"),
        (FakeTok({"a": 0, "z": 1}), "missing from the draft"),
        (FakeTok({"a": 0, "b": 1}, eos=0), "eos_token_id"),
    ],
)
def test_mismatched_event_spaces_are_refused(draft, message):
    with pytest.raises(TokenizerMismatch, match=message):
        admit(FakeTok({"a": 0, "b": 1}), draft, 2, 2)


def test_logit_rows_narrower_than_the_tokenizer_are_refused():
    tok = FakeTok({"a": 0, "b": 1, "c": 2})
    with pytest.raises(TokenizerMismatch, match="could never be scored"):
        admit(tok, tok, 3, 2)


def test_device_and_dtype_resolution():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="no CUDA"):
            resolve_device("cuda")
    with pytest.raises(UsageError):
        resolve_device("tpu")
    assert resolve_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(UsageError):
        resolve_dtype("int4")


def test_loading_failures_are_one_typed_line(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        load(None, str(tmp_path / "missing.gguf"), torch.float32, torch.device("cpu"))
    with pytest.raises(ModelLoadError, match="cannot load the model of"):
        load(str(tmp_path), None, torch.float32, torch.device("cpu"))  # an empty folder
    with pytest.raises(ModelLoadError):
        load("no-such-org/no-such-model", None, torch.float32, torch.device("cpu"))


def test_out_of_memory_on_load_says_what_to_try(tmp_path, monkeypatch):
    import transformers

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", oom)
    with pytest.raises(OutOfMemory, match="try --dtype bfloat16"):
        load(str(tmp_path), None, torch.float32, torch.device("cpu"))


def test_a_hub_id_without_a_network_fails_in_one_line_without_the_hubs_retry_chatter(monkeypatch, capfd):
    """Offline, huggingface_hub retries a hub id five times and warns at each retry; a load says
    nothing on stderr but its one-line error."""
    import transformers
    from huggingface_hub.utils import logging as hub_logging

    def unreachable(*args, **kwargs):
        http = hub_logging.get_logger("huggingface_hub.utils._http")
        for attempt in range(1, 6):  # what huggingface_hub's http_backoff says before each retry
            http.warning(f"Retrying in {attempt}s [Retry {attempt}/5].")
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", unreachable)
    capfd.readouterr()
    with pytest.raises(ModelLoadError, match="couldn't connect") as err:
        load("some-org/some-model", None, torch.float32, torch.device("cpu"))
    assert "\n" not in str(err.value)
    assert "Retry" not in capfd.readouterr().err


@pytest.mark.parametrize("resolves", [False, True])
def test_a_hub_id_is_read_from_the_cache_at_once_where_the_hubs_name_does_not_resolve(monkeypatch, resolves):
    """Without a network huggingface_hub retries a hub id for about 30 s before it gives up (or falls
    back to the cache); where the hub's host name does not resolve, a load asks the cache alone."""
    import socket

    import transformers
    from huggingface_hub import constants

    from specd.models.hf import loading

    def getaddrinfo(host, *args, **kwargs):
        if not resolves:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.1", 443))]

    asked = []

    def from_pretrained(where, **kwargs):
        asked.append(kwargs.get("local_files_only", False))
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the suite runs offline: as a user's shell is
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    loading.hub_unreachable.cache_clear()
    try:
        with pytest.raises(ModelLoadError, match="no network here"):
            load("some-org/some-model", None, torch.float32, torch.device("cpu"))
        assert asked == [not resolves]
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # told offline: the hub reads its cache itself
        loading.hub_unreachable.cache_clear()
        assert loading.hub_unreachable() is False
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # the proxy resolves the hub's name
        loading.hub_unreachable.cache_clear()
        assert loading.hub_unreachable() is False
    finally:
        loading.hub_unreachable.cache_clear()


def test_a_gguf_load_draws_no_progress_bar():
    """transformers' GGUF loader draws a bar over the tensors with its own tqdm; within
    one_gguf_parse (every load of a GGUF file) it draws nothing, and after it the bar is back."""
    pytest.importorskip("gguf")
    import io

    from transformers import modeling_gguf_pytorch_utils as loader

    from specd.models.hf.loading import one_gguf_parse

    def drawn() -> str:
        out = io.StringIO()
        for _ in loader.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...", file=out):
            pass
        return out.getvalue()

    with one_gguf_parse():
        assert drawn() == ""
    assert "de-quantizing" in drawn()


def test_the_plain_gguf_reader_reads_what_ggufs_own_reader_reads(tmp_path):
    """one_gguf_parse reads GGUF files through a plain array view of the memory map (about 4x
    faster on a large vocabulary); every field and tensor must be gguf's own, part for part:
    scalars of each type, strings, arrays of strings and of numbers, quantized and float tensors."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    from specd.models.hf.loading import one_gguf_parse

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("test.u32", 7)
    writer.add_int64("test.i64", -3)
    writer.add_float32("test.f32", 0.25)
    writer.add_bool("test.flag", True)
    writer.add_string("test.name", "héllo")
    writer.add_token_list(["<s>", "a", "bé", "", "▁word"])
    writer.add_token_scores([0.0, -1.5, 2.25, 3.0, -0.5])
    writer.add_array("test.ints", [1, -2, 3])
    writer.add_tensor("w.weight", np.arange(64, dtype=np.float32).reshape(2, 32))
    writer.add_tensor("h.weight", np.linspace(-1, 1, 32, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    own = gguf.GGUFReader(path)
    with one_gguf_parse():
        plain = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is plain  # one parse per file within the block
    assert type(plain) is not type(own) and isinstance(plain, type(own))
    assert list(plain.fields) == list(own.fields) and len(own.fields) > 8
    for name, field in own.fields.items():
        other = plain.fields[name]
        assert (other.offset, other.name, other.data) == (field.offset, field.name, field.data)
        assert other.types == field.types
        assert len(other.parts) == len(field.parts)
        for a, b in zip(other.parts, field.parts):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert [t.name for t in plain.tensors] == ["w.weight", "h.weight"] == [t.name for t in own.tensors]
    for a, b in zip(plain.tensors, own.tensors):
        assert (a.tensor_type, a.shape.tolist(), a.data_offset) == (b.tensor_type, b.shape.tolist(), b.data_offset)
        assert a.data.dtype == b.data.dtype and a.data.tobytes() == b.data.tobytes()
    assert gguf.GGUFReader is not type(plain)  # gguf's own reader is back after the block


def test_gguf_values_parse_as_transformers_parses_them(tmp_path):
    """Within one_gguf_parse transformers' metadata parse decodes a string's bytes as they lie: every
    value of every field (scalars, strings, arrays of strings and of numbers) is what transformers'
    own parse gives, and after the block its own parse is back."""
    gguf = pytest.importorskip("gguf")
    from transformers import modeling_gguf_pytorch_utils as loader

    from specd.models.hf.loading import one_gguf_parse

    test_the_plain_gguf_reader_reads_what_ggufs_own_reader_reads(tmp_path)  # writes small.gguf
    fields = gguf.GGUFReader(tmp_path / "small.gguf").fields
    own = loader._gguf_parse_value

    def parsed(parse) -> dict:
        return {name: [parse(f.parts[i], f.types) for i in f.data] for name, f in fields.items()}

    with one_gguf_parse():
        assert loader._gguf_parse_value is not own
        fast = parsed(loader._gguf_parse_value)
    assert loader._gguf_parse_value is own
    assert fast == parsed(own)
    assert fast["tokenizer.ggml.tokens"] == ["<s>", "a", "bé", "", "▁word"] and fast["test.name"] == ["héllo"]
    assert [type(v) for v in fast["test.ints"]] == [int] * 3 and fast["test.flag"] == [True]


def test_the_weights_digest_reads_host_weights_in_place_and_other_weights_from_their_files(tiny_models, tmp_path):
    """In host memory: sha256 over each parameter's name, shape, dtype and bytes (float32 and
    bfloat16 alike). Weights elsewhere (here meta tensors, as a device map leaves them; a GPU takes
    the same path) are hashed from their weight files, never copied to the host; with no weight file
    to hash there is no digest, not a digest of nothing."""
    import hashlib

    from transformers import AutoConfig, AutoModelForCausalLM

    from specd.models.hf.loading import weights_digest

    model = AutoModelForCausalLM.from_pretrained(tiny_models[0])
    for dtype in (torch.float32, torch.bfloat16):
        model = model.to(dtype)
        h = hashlib.sha256()
        for name, p in sorted(model.state_dict().items()):
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
            h.update(bytes(p.detach().contiguous().reshape(-1).view(torch.uint8).tolist()))
        assert weights_digest(model) == h.hexdigest()

    with torch.device("meta"):
        elsewhere = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_models[0]))
    elsewhere.config._name_or_path = tiny_models[0]
    files = sorted(Path(tiny_models[0]).glob("*.safetensors"))
    assert files
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + path.read_bytes())
    assert weights_digest(elsewhere) == "files:" + h.hexdigest()
    elsewhere.config._name_or_path = str(tmp_path)  # a folder without weight files
    assert weights_digest(elsewhere) is None
