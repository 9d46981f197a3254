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
import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.loading import InputError, decode_json, is_folder, load_bytes, read_bytes, walk_files
from pytest_gpuperf.cli.output import emit, printable, write_text

SIGNATURE_SCHEMA = 1
SIGNATURE_LIMIT = 64 * 1024 * 1024
KEY_LIMIT = 64 * 1024
"""Keys and signatures are small; a larger file is not one."""


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
        if is_folder(path):
            found = {p.relative_to(path).as_posix(): p for p in walk_files(path)}
        else:
            found = {path.name: path}  # read_bytes says what is wrong with it, if anything
        for name, file in found.items():
            if name in files:
                raise InputError(f"{file}: a second file named {name} in the bundle; sign one folder instead")
            files[name] = file
    if not files:
        raise InputError(f"{', '.join(map(str, paths))}: no results files to sign")
    return files


def digest(path: Path) -> str:
    """SHA-256 of the file's canonical form.

    The file is read once and those bytes are validated as results, parsed and hashed, so what is signed is
    exactly what was checked (a file swapped between two reads cannot slip in). JSON is parsed strictly
    (loading.decode_json): a duplicate key, which readers resolve differently, is refused rather than signed.
    """
    data = read_bytes(path)
    load_bytes(data, path)
    if path.suffix.lower() == ".json" or data.lstrip()[:1] == b"{":
        data = canonical(decode_json(data, path))
    return hashlib.sha256(data).hexdigest()


def manifest(paths: list[Path]) -> dict[str, str]:
    return {name: digest(file) for name, file in sorted(bundle_files(paths).items())}


def default_signature(paths: list[Path], given: str | None) -> Path:
    if given:
        return Path(given)
    if len(paths) != 1:
        raise InputError("several paths given: name the signature file with -o/--signature")
    path = paths[0] if paths[0].name else Path(os.path.abspath(paths[0]))  # '.' or 'bundle/..'
    if not path.name:
        raise InputError(f"{paths[0]}: cannot name a signature after the root folder; give one with -o/--signature")
    return path.with_name(path.name + ".sig")


def _create(path: Path, data: bytes, mode: int, what: str) -> None:
    """A new file (O_EXCL: never through a planted link, never over one created since the check)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except OSError as error:
        raise InputError(
            f"{path}: cannot write the {what} ({error.strerror or error}); give another KEY path"
        ) from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(path)  # a partly written key is no key
        raise InputError(
            f"{path}: cannot write the {what} ({error.strerror or error}); give another KEY path"
        ) from None


def keygen(key_path: Path) -> int:
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    if not key_path.name or key_path.name in (".", ".."):
        raise InputError(f"{key_path}: names a folder; give a file name for the key, e.g. {key_path / 'partner.key'}")
    public_path = key_path.with_name(key_path.name + ".pub")
    _check_printable(key_path)
    for path in (key_path, public_path):
        if os.path.lexists(path):
            raise InputError(f"{path}: already exists; refusing to overwrite a key")
    folder = key_path.parent
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder for the key {key_path.name}; create it (mkdir -p {folder}) first")
    private = ed25519.Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _create(key_path, pem, 0o600, "private key")
    try:
        _create(public_path, public, 0o644, "public key")
    except InputError as error:
        with contextlib.suppress(OSError):
            os.unlink(key_path)  # half a pair is useless, and would block the next keygen
        raise InputError(f"{error}; no key was kept") from None
    print(f"private key: {key_path} (keep it secret)\npublic key: {public_path} (give it to the vendor)")
    return 0


def _check_printable(key_path: Path) -> None:
    """Refuse, before anything is written, a key path the closing lines cannot print: a name of undecodable bytes
    (held as lone surrogates) or of characters standard output cannot encode. Printing it after both keys were
    written would fail with a traceback and leave the user unsure whether keygen worked."""
    text = str(key_path)
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    errors = getattr(sys.stdout, "errors", None) or "strict"
    try:
        text.encode("utf-8")
        text.encode(encoding, errors)
    except (UnicodeEncodeError, LookupError):
        raise InputError(
            f"{printable(text)}: the key's file name is not text this terminal ({encoding}) can show (undecodable "
            "bytes or characters it cannot encode); give a KEY path of plain characters, e.g. partner.key"
        ) from None


def _load_key(path: Path, *, private: bool) -> Any:
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    data = read_bytes(path, limit=KEY_LIMIT)
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
    write_text(output, json.dumps(document, indent=1, sort_keys=True) + "\n", what="signature")
    emit(f"signed {len(files)} file(s): {output}\n")
    return 0


def verify(paths: list[Path], public_path: Path, signature_path: Path) -> int:
    from cryptography.exceptions import InvalidSignature

    public = _load_key(public_path, private=False)
    document = decode_json(read_bytes(signature_path, limit=SIGNATURE_LIMIT), signature_path)
    try:
        signature = base64.b64decode(document["signature"], validate=True)
        signed_files = document["files"]
        if document.get("algorithm") != "ed25519" or not isinstance(signed_files, dict):
            raise ValueError("not an ed25519 gpuperf signature")
    except (ValueError, KeyError, TypeError) as error:
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
