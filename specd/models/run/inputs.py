"""The path rule's inputs of a generation run: every file its options read and every model folder
it loads from, by the flag that names each (``specd.files.check_paths`` then refuses an output
that names one, or lies inside a model folder). The commands and ``specd.Pair`` read them here."""

from __future__ import annotations

from pathlib import Path

from specd.core.tree_shape import tree_file
from specd.files import folder_files
from specd.models.run.drafts import parse_drafts
from specd.models.run.embedded import EMBEDDED, embedded_name
from specd.models.run.options import GenerateOptions


def run_inputs(options: GenerateOptions, folders: dict[str, str]) -> dict[str, str | None]:
    """Every file a generation run's options read, by the flag that names it (``folders``, the run's
    model folders from ``model_folders``: each file in them); the command adds its own (a prompts
    file, a config file)."""
    inputs = {
        "--k-schedule": options.k_schedule,
        "--target-gguf": options.target_gguf,
        "--draft-gguf": options.draft_gguf,
        "--draft-vocab": options.draft_vocab,
        "--tree": tree_file(options.tree),  # an EAGLE choices file (None: a shape typed inline, or auto)
    }
    return {**inputs, **model_files(folders)}


def model_folders(target: str | None, draft: str | None, target_gguf: str | None = None) -> dict[str, str]:
    """Every model folder a run reads, by the flag that names it: ``--target``, each model of the
    ``--draft`` list (a hub id: its snapshot in the Hugging Face cache, when it is there), and an
    embedded target's folders in specd's cache (its converted copy, its assembled GGUF) and the
    installed packages its GGUF is read from. A name
    that is no folder here names none (loading says what is wrong with it)."""
    folders: dict[str, str | None] = {}
    name = embedded_name(target, target_gguf)
    if name is not None:
        for folder in EMBEDDED[name].cache_folders():
            folders[f"--target embedded:{name} (specd's cache {folder.name})"] = str(folder)
        for package, folder in EMBEDDED[name].package_folders().items():
            folders[f"--target embedded:{name} (its package {package})"] = str(folder)
    elif target is not None:
        folders["--target"] = local_folder(target)
    for spec in parse_drafts(draft):
        if spec.needs_model:
            flag = "--draft" if spec.text == draft else f"--draft (its source {spec.text})"
            folders[flag] = local_folder(str(spec.value))
    return {flag: folder for flag, folder in folders.items() if folder is not None and Path(folder).is_dir()}


def local_folder(model: str) -> str | None:
    """The folder a model name is read from: the path itself, or a hub id's snapshot already in the
    Hugging Face cache (looked up offline), else None."""
    if Path(model).exists():
        return model
    try:
        from huggingface_hub import snapshot_download  # imported here: only a hub id pays for it

        return snapshot_download(model, local_files_only=True)
    except Exception:  # noqa: BLE001 - not an id, not cached, no hub library: no folder to protect
        return None


def model_files(folders: dict[str, str]) -> dict[str, str]:
    """Each file of each model folder, as an input named by its folder's flag."""
    inputs: dict[str, str] = {}
    for flag, folder in folders.items():
        for path in folder_files(folder):
            inputs.setdefault(f"{flag} (the model folder's {path.relative_to(folder)})", str(path))
    return inputs
