"""`gpuperf keygen`, `sign`, `verify`: a partner signs a bundle of results files; the vendor checks it.

What is signed: for every results file (JSON, parsed and re-serialised canonically: sorted keys, no spaces,
ASCII) its SHA-256, in a manifest keyed by the file's name inside the bundle; the ed25519 signature covers the
canonical JSON of that manifest. Reformatting a file keeps the signature valid; editing any number, verdict or
fingerprint field, renaming, adding or removing a file breaks it. JUnit XML is signed byte for byte.
Uses the `cryptography` package (the 'sign' extra).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.loading import SUFFIXES, InputError, load_file, read_bytes

SIGNATURE_SCHEMA = 1


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise InputError(
            "the 'cryptography' package is needed to sign and verify: pip install 'pytest-gpuperf[sign]'"
        ) from None
    return ed25519


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def bundle_files(paths: list[Path]) -> dict[str, Path]:
    """Name inside the bundle -> file: folder contents by relative path, single files by name."""
    files: dict[str, Path] = {}
    for path in paths:
        if path.is_dir():
            found = {
                p.relative_to(path).as_posix(): p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix.lower() in SUFFIXES
            }
        elif path.exists():
            found = {path.name: path}
        else:
            raise InputError(f"{path}: no such file or folder")
        for name, file in found.items():
            if name in files:
                raise InputError(f"{file}: a second file named {name} in the bundle; sign one folder instead")
            files[name] = file
    if not files:
        raise InputError(f"{', '.join(map(str, paths))}: no results files to sign")
    return files


def digest(path: Path) -> str:
    """SHA-256 of the file's canonical form; the file must load as results (so nothing unreadable is signed)."""
    load_file(path)
    data = read_bytes(path)
    if path.suffix.lower() == ".json" or data.lstrip()[:1] == b"{":
        data = canonical(json.loads(data.decode("utf-8")))
    return hashlib.sha256(data).hexdigest()


def manifest(paths: list[Path]) -> dict[str, str]:
    return {name: digest(file) for name, file in sorted(bundle_files(paths).items())}


def default_signature(paths: list[Path], given: str | None) -> Path:
    if given:
        return Path(given)
    if len(paths) != 1:
        raise InputError("several paths given: name the signature file with -o/--signature")
    return paths[0].with_name(paths[0].name + ".sig")


def keygen(key_path: Path) -> int:
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    public_path = key_path.with_name(key_path.name + ".pub")
    for path in (key_path, public_path):
        if path.exists():
            raise InputError(f"{path}: already exists; refusing to overwrite a key")
    private = ed25519.Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    public_path.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    print(f"private key: {key_path} (keep it secret)\npublic key: {public_path} (give it to the vendor)")
    return 0


def _load_key(path: Path, *, private: bool) -> Any:
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    data = read_bytes(path)
    try:
        key = (
            serialization.load_pem_private_key(data, password=None)
            if private
            else serialization.load_pem_public_key(data)
        )
    except (ValueError, TypeError) as error:
        raise InputError(f"{path}: not a PEM {'private' if private else 'public'} key ({str(error)[:80]})") from None
    wanted = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, wanted):
        raise InputError(f"{path}: not an ed25519 key (make one with gpuperf keygen)")
    return key


def sign(paths: list[Path], key_path: Path, output: Path) -> int:
    from cryptography.hazmat.primitives import serialization

    key = _load_key(key_path, private=True)
    files = manifest(paths)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    document = {
        "schema": SIGNATURE_SCHEMA,
        "algorithm": "ed25519",
        "files": files,
        "public_key": base64.b64encode(public).decode(),
        "signature": base64.b64encode(key.sign(canonical(files))).decode(),
    }
    output.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"signed {len(files)} file(s): {output}")
    return 0


def verify(paths: list[Path], public_path: Path, signature_path: Path) -> int:
    from cryptography.exceptions import InvalidSignature

    public = _load_key(public_path, private=False)
    try:
        document = json.loads(read_bytes(signature_path).decode("utf-8"))
        signature = base64.b64decode(document["signature"], validate=True)
        signed_files = document["files"]
        if document.get("algorithm") != "ed25519" or not isinstance(signed_files, dict):
            raise ValueError("not an ed25519 gpuperf signature")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise InputError(f"{signature_path}: not a gpuperf signature file ({str(error)[:80]})") from None
    try:
        public.verify(signature, canonical(signed_files))
    except InvalidSignature:
        print(f"INVALID: {signature_path} was not made by the key {public_path} (or the manifest was edited)")
        return 1
    current = manifest(paths)
    problems = [
        f"{name}: changed since signing"
        for name in sorted(set(current) & set(signed_files))
        if current[name] != signed_files[name]
    ]
    problems += [f"{name}: signed but missing" for name in sorted(set(signed_files) - set(current))]
    problems += [f"{name}: not covered by the signature" for name in sorted(set(current) - set(signed_files))]
    if problems:
        print(f"INVALID: {len(problems)} problem(s):\n  " + "\n  ".join(problems))
        return 1
    print(f"OK: {len(current)} file(s) signed by {public_path}, unchanged")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "keygen":
        return keygen(Path(args.key))
    paths = [Path(path) for path in args.paths]
    if args.action == "sign":
        return sign(paths, Path(args.key), default_signature(paths, args.output))
    return verify(paths, Path(args.public_key), default_signature(paths, args.signature))
