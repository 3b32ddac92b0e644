"""Publish the app to a Hugging Face Space: exactly the files the Space runs, large ones through LFS, no git history.

    python .ci/publish_space.py --dry-run                 # list the files and their sizes; upload nothing
    python .ci/publish_space.py --repo USER/SPACE-NAME    # needs `huggingface-cli login` or HF_TOKEN

Hugging Face refuses files over 10 MB that are not stored with Git LFS. This repository's history holds the
checkpoints as plain git objects, so pushing it to a Space is refused. `upload_folder` (huggingface_hub, which
gradio installs) sends the current files instead, and the Hub stores the large ones in LFS.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the Space runs: the app, its packages, the checkpoints, the run-time requirements, the README that
# carries the Space's settings (its YAML header) and the LFS rule.
SPACE_PATTERNS = ("app.py", "requirements.txt", "README.md", ".gitattributes", "attention_inspector/*.py", "model/*.py",
                  "model/*/*.py", "viz/*.py", "ui/*.py", "ui/tabs/*.py", "ui/static/*", "checkpoints/*/*")
LFS_THRESHOLD = 10 * 2**20  # the Hub refuses larger files outside LFS


def space_files(root: Path = ROOT) -> list[Path]:
    """Every file the Space needs, relative to `root`: SPACE_PATTERNS and the images the README shows."""
    files = {path.relative_to(root) for pattern in SPACE_PATTERNS for path in root.glob(pattern) if path.is_file()}
    readme = (root / "README.md").read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme) + re.findall(r'<img src="([^"]+)"', readme)
    files |= {Path(image) for image in images if (root / image).is_file()}
    return sorted(files)


def listing(root: Path, files: list[Path]) -> str:
    """One line per file (size, and whether the Hub will store it in LFS), then the total."""
    lines, total = [], 0
    for path in files:
        size = (root / path).stat().st_size
        total += size
        lines.append(f"{size / 2**20:9.2f} MB  {path.as_posix()}" + ("  (LFS)" if size > LFS_THRESHOLD else ""))
    lines.append(f"{total / 2**20:9.2f} MB  in {len(files)} files")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", help="the Space, as USER/NAME (created if it does not exist)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be uploaded and stop")
    parser.add_argument("--message", default="Publish the app", help="the commit message on the Space")
    args = parser.parse_args(argv)
    files = space_files()
    print(listing(ROOT, files))
    if args.dry_run:
        return
    if not args.repo:
        parser.error("--repo USER/NAME is needed to upload (or pass --dry-run)")
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(args.repo, repo_type="space", space_sdk="gradio", exist_ok=True)
    commit = api.upload_folder(repo_id=args.repo, repo_type="space", folder_path=ROOT,
                               allow_patterns=[path.as_posix() for path in files], commit_message=args.message)
    print(f"uploaded to {commit.commit_url}", file=sys.stderr)


if __name__ == "__main__":
    main()
