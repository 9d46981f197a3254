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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.loading import (
    InputError,
    Run,
    decode_json,
    is_folder,
    load_bytes,
    quote,
    read_bytes,
    walk_files,
)
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


def read_signed(path: Path) -> tuple[str, Run]:
    """SHA-256 of the file's canonical form, and the run it holds.

    The file is read once and those bytes are validated as results, parsed and hashed, so what is signed (and what
    `variance --trust` judges) is exactly what was checked: a file swapped between two reads cannot slip in. JSON
    is parsed strictly (loading.decode_json): a duplicate key, which readers resolve differently, is refused rather
    than signed.
    """
    data = read_bytes(path)
    run = load_bytes(data, path)
    if path.suffix.lower() == ".json" or data.lstrip()[:1] == b"{":
        data = canonical(decode_json(data, path))
    return hashlib.sha256(data).hexdigest(), run


def read_bundle(paths: list[Path]) -> dict[str, tuple[str, Run]]:
    """Name inside the bundle -> (digest, run), in the bundle's path order (the order a folder's runs load in)."""
    return {name: read_signed(file) for name, file in bundle_files(paths).items()}


def manifest(paths: list[Path]) -> dict[str, str]:
    return {name: digest for name, (digest, _) in sorted(read_bundle(paths).items())}


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
        if not private and b"PRIVATE KEY" in data:
            raise InputError(
                f"{path}: a private key where a public one was expected; give KEY.pub, which gpuperf keygen wrote "
                "beside it (and keep this one secret)"
            ) from None
        raise InputError(f"{path}: not a PEM {'private' if private else 'public'} key ({str(error)[:80]})") from None
    wanted = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, wanted):
        raise InputError(f"{path}: not an ed25519 key (make one with gpuperf keygen)")
    return key


def key_fingerprint(raw: bytes) -> str:
    """How a key is named in output: the first 16 hex digits of the SHA-256 of its 32 raw bytes."""
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class PublicKey:
    """A public key read from a PEM file, named by that file and by its fingerprint."""

    path: Path
    fingerprint: str
    key: Any
    """The ed25519 public key object (cryptography)."""

    @property
    def label(self) -> str:
        return f"{self.path.name} ({self.fingerprint})"


def load_public_key(path: Path) -> PublicKey:
    key = _load_key(path, private=False)  # first: it says how to install cryptography where it is missing
    from cryptography.hazmat.primitives import serialization

    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PublicKey(path=path, fingerprint=key_fingerprint(raw), key=key)


def trusted_keys(paths: Sequence[Path]) -> list[PublicKey]:
    """The keys named by ``--trust``: PEM files, or folders of *.pub files; one key given twice counts once."""
    keys: dict[str, PublicKey] = {}
    for path in paths:
        try:
            files = walk_files(path, (".pub",)) if is_folder(path) else [path]
            if not files:
                raise InputError(
                    f"{path}: folder holds no *.pub public keys; put the partners' KEY.pub files (from gpuperf "
                    "keygen) there"
                )
            for file in files:
                key = load_public_key(file)
                keys.setdefault(key.fingerprint, key)
        except InputError as error:
            raise InputError(f"{error} (given with --trust)") from None
    return list(keys.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """A signature file as `gpuperf sign` writes it, its fields checked for shape (not yet verified)."""

    path: Path
    files: dict[str, str]
    """Name inside the bundle -> SHA-256 of its canonical form: what the signature covers."""
    value: bytes
    claimed: str | None
    """Fingerprint of the public key the file names. Unverified: it only says whom the file claims as signer."""


def read_signature(path: Path) -> Signature:
    document = decode_json(read_bytes(path, limit=SIGNATURE_LIMIT), path)
    try:
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        if document.get("algorithm") != "ed25519":
            raise ValueError(f"algorithm {quote(document.get('algorithm'))}, not ed25519")
        files = document.get("files")
        if not isinstance(files, dict) or not all(isinstance(value, str) for value in files.values()):
            raise ValueError("'files' is not an object of file digests")
        value = _base64(document.get("signature"), "signature", 64)
        public = document.get("public_key")
        claimed = key_fingerprint(_base64(public, "public_key", 32)) if public is not None else None
    except ValueError as error:
        raise InputError(
            f"{path}: not a gpuperf signature file ({str(error)[:80]}); sign the bundle again with gpuperf sign"
        ) from None
    return Signature(path=path, files=files, value=value, claimed=claimed)


def _base64(text: Any, field: str, size: int) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"'{field}' is not base64 text")
    try:
        value = base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError(f"'{field}' is not base64 text") from None
    if len(value) != size:
        raise ValueError(f"'{field}' holds {len(value)} bytes, not an ed25519 {field}'s {size}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Checked:
    """What a bundle's signature says of it: who signed it, and what changed since."""

    signature: Signature
    signer: PublicKey | None
    """The key among those given under which the signature verifies; None: none of them (then nothing was read)."""
    problems: tuple[str, ...] = ()
    """'NAME: changed since signing', '... signed but missing', '... not covered by the signature'."""
    runs: tuple[Run, ...] = ()
    """The bundle's runs, parsed from the very bytes whose digests were checked, in the bundle's path order."""


def check_bundle(paths: list[Path], signature_path: Path, keys: Sequence[PublicKey]) -> Checked:
    """The one verification `gpuperf verify` and `gpuperf variance --trust` share.

    The signature is checked against its manifest first (a forged or foreign signature is told without reading
    the bundle), then each file's digest against the manifest, from the same read that yields its run."""
    from cryptography.exceptions import InvalidSignature

    signature = read_signature(signature_path)
    message = canonical(signature.files)
    signer = None
    for key in keys:
        try:
            key.key.verify(signature.value, message)
        except InvalidSignature:
            continue
        signer = key
        break
    if signer is None:
        return Checked(signature=signature, signer=None)
    current = read_bundle(paths)
    signed = signature.files
    problems = [
        f"{name}: changed since signing"
        for name in sorted(set(current) & set(signed))
        if current[name][0] != signed[name]
    ]
    problems += [f"{name}: signed but missing" for name in sorted(set(signed) - set(current))]
    problems += [f"{name}: not covered by the signature" for name in sorted(set(current) - set(signed))]
    return Checked(
        signature=signature, signer=signer, problems=tuple(problems), runs=tuple(run for _, run in current.values())
    )


def trusted_bundle(path: Path, keys: Sequence[PublicKey]) -> tuple[list[Run], PublicKey]:
    """The runs of one bundle (a folder or a file, signed into PATH.sig beside it) whose signature verifies under
    one of ``keys`` and whose files are as signed; otherwise an InputError saying which and what to do."""
    signature_path = default_signature([path], None)
    if not os.path.lexists(signature_path):
        raise InputError(
            f"{path}: not signed (no {signature_path} beside it); its sender signs it with "
            f"gpuperf sign --key KEY {path}"
        )
    checked = check_bundle([path], signature_path, keys)
    if checked.signer is None:
        raise InputError(f"{path}: {_unverified(checked.signature, keys)}")
    if checked.problems:
        more = f" (and {len(checked.problems) - 1} more)" if len(checked.problems) > 1 else ""
        raise InputError(
            f"{path}: {checked.problems[0]}{more}, under a valid signature by {checked.signer.label}; the bundle is "
            "not what was signed: ask its sender for the files as signed, or a fresh signature"
        )
    return list(checked.runs), checked.signer


def _unverified(signature: Signature, keys: Sequence[PublicKey]) -> str:
    named = next((key for key in keys if key.fingerprint == signature.claimed), None)
    if named is not None:
        return (
            f"{signature.path} names the trusted key {named.label} but does not verify under it: the signature or "
            "its list of files was edited after signing; ask its sender to sign the bundle again"
        )
    shown = ", ".join(key.label for key in keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    if signature.claimed is None:
        return f"{signature.path} verifies under none of the trusted keys ({shown}); ask its sender which key signed it"
    return (
        f"signed by key {signature.claimed}, which is not trusted (trusted: {shown}); if you trust its signer, add "
        "their KEY.pub with --trust"
    )


def sign(paths: list[Path], key_path: Path, output: Path) -> int:
    key = _load_key(key_path, private=True)  # first: it says how to install cryptography where it is missing
    from cryptography.hazmat.primitives import serialization

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
    checked = check_bundle(paths, signature_path, [load_public_key(public_path)])
    if checked.signer is None:
        print(f"INVALID: {signature_path} was not made by the key {public_path} (or the manifest was edited)")
        return 1
    if checked.problems:
        print(f"INVALID: {len(checked.problems)} problem(s):\n  " + "\n  ".join(checked.problems))
        return 1
    print(f"OK: {len(checked.runs)} file(s) signed by {public_path} (key {checked.signer.fingerprint}), unchanged")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "keygen":
        return keygen(Path(args.key))
    paths = [Path(path) for path in args.paths]
    if args.action == "sign":
        return sign(paths, Path(args.key), default_signature(paths, args.output))
    return verify(paths, Path(args.public_key), default_signature(paths, args.signature))
