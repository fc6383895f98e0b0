"""What the .deb and the .rpm hold, checked with Debian's and RPM's own tools:
lintian and rpmlint, the conffile, the man pages as man renders them, bash
completion, and the RPM scriptlets run against a stand-in systemctl.
test_package_systemd.py installs the .deb under a real systemd."""

import gzip
import os
import re
import subprocess
import io
import tarfile

import pytest

import packages
from daemon import ROOT, TARGET

# rpmlint findings that stay, each for a reason; anything else fails.
RPMLINT_ACCEPTED = {
    # Packages are signed by whoever publishes them, with their key
    # (`rpmsign --addsign`, or `cargo generate-rpm --signing-key`).
    "E: no-signature",
    # cargo-generate-rpm 0.21 has no setting for these header tags (Group is
    # deprecated in RPM anyway; the Debian changelog carries the history).
    "E: no-packager-tag",
    "E: no-group-tag",
    "E: no-changelogname-tag",
    "E: no-buildhost-tag",
    # /usr/lib holds only the systemd unit; the package is arch-specific
    # because of /usr/bin/stallwatch.
    "W: only-non-binary-in-usr-lib",
    # rpmlint 2.4.0 compares the binary's name with the man page's section
    # ("1"), not its name (FilesCheck.py), so it says this of every package.
    "W: no-manual-page-for-binary stallwatch",
    # The SPDX identifier, which Fedora and openSUSE use; rpmlint's built-in
    # list has older names.
    "W: invalid-license Apache-2.0",
}
# Man pages are gzip-compressed, as rpm's brp-compress does on Fedora, RHEL
# and openSUSE; rpmlint's default expects bzip2.
RPMLINT_CONFIG = 'CompressExtension = "gz"\n'


@pytest.fixture(scope="module")
def built():
    return packages.built()


def deb_files(deb):
    """{path: bytes} of the .deb's data archive."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name.removeprefix("."): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def deb_control(deb, name):
    return subprocess.run(["dpkg-deb", "--info", str(deb), name], capture_output=True, text=True, check=True).stdout


def rpm_query(rpm, *args):
    return subprocess.run(["rpm", "-qp", *args, str(rpm)], capture_output=True, text=True, check=True).stdout


def man_pages():
    """The pages xtask generates: the command and each subcommand."""
    result = subprocess.run([str(TARGET / "stallwatch"), "--help"], capture_output=True, text=True, check=True)
    commands = re.findall(r"^  (\w+)  ", result.stdout.split("Commands:")[1].split("Options:")[0], re.M)
    return {"stallwatch"} | {f"stallwatch-{c}" for c in commands if c != "help"}


def test_deb_is_lintian_clean(built):
    """Every tag lintian still finds is overridden in the package with its
    reason (deploy/debian/lintian-overrides); an override no longer needed
    shows as unused-override and fails too."""
    result = subprocess.run(
        ["lintian", "--pedantic", "--display-info", "--display-experimental", str(built["deb"])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    tags = [line for line in result.stdout.splitlines() if re.match(r"[EWIPX]: ", line)]
    assert tags == [], result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


def test_deb_holds_the_daemon_unit_config_docs_man_pages_and_completions(built):
    files = deb_files(built["deb"])
    assert files["/usr/bin/stallwatch"].startswith(b"\x7fELF")
    assert files["/usr/lib/systemd/system/stallwatch.service"] == (ROOT / "deploy/systemd/stallwatch.service").read_bytes()
    assert files["/etc/stallwatch/config.toml"] == (ROOT / "config.example.toml").read_bytes()
    assert deb_control(built["deb"], "conffiles").split() == ["/etc/stallwatch/config.toml"]
    for page in man_pages():
        assert f"/usr/share/man/man1/{page}.1.gz" in files, page
    for path in (
        "/usr/share/bash-completion/completions/stallwatch",
        "/usr/share/zsh/vendor-completions/_stallwatch",
        "/usr/share/fish/vendor_completions.d/stallwatch.fish",
        "/usr/share/doc/stallwatch/README.md",
        "/usr/share/doc/stallwatch/docs/deploy.md",
        "/usr/share/doc/stallwatch/copyright",
        "/usr/share/doc/stallwatch/changelog.Debian.gz",
    ):
        assert path in files, path
    changelog = gzip.decompress(files["/usr/share/doc/stallwatch/changelog.Debian.gz"]).decode()
    assert changelog.startswith(f"stallwatch ({packages.workspace_version()}-1) "), "changelog behind Cargo.toml"


def test_deb_maintainer_scripts_enable_start_stop_and_purge_through_the_debian_helpers(built):
    postinst = deb_control(built["deb"], "postinst")
    prerm = deb_control(built["deb"], "prerm")
    postrm = deb_control(built["deb"], "postrm")
    assert "deb-systemd-helper enable stallwatch.service" in postinst
    assert re.search(r"deb-systemd-invoke (start|\$_dh_action) .*stallwatch.service", postinst)
    assert "deb-systemd-invoke stop stallwatch.service" in prerm
    assert "deb-systemd-helper purge stallwatch.service" in postrm


def test_man_pages_render_without_warnings(built, tmp_path):
    files = deb_files(built["deb"])
    for page in man_pages():
        path = tmp_path / f"{page}.1"
        path.write_bytes(gzip.decompress(files[f"/usr/share/man/man1/{page}.1.gz"]))
        result = subprocess.run(
            ["man", "--warnings", "-l", str(path)],
            capture_output=True,
            text=True,
            env=dict(os.environ, MANWIDTH="80"),
            timeout=60,
        )
        assert result.returncode == 0 and result.stderr == "", (page, result.stderr)
        text = result.stdout
        assert "NAME" in text and "SYNOPSIS" in text, text
        if page == "stallwatch":
            for want in ("--config", "--log-format", "FILES", "/etc/stallwatch/config.toml", "JOURNAL_STREAM", "NO_COLOR", "EXIT STATUS"):
                assert want in text, want


def test_bash_completes_subcommands_and_option_values(built, tmp_path):
    script = tmp_path / "stallwatch.bash"
    script.write_bytes(deb_files(built["deb"])["/usr/share/bash-completion/completions/stallwatch"])

    def complete(*words):
        line = " ".join(f"'{w}'" for w in words)
        probe = (
            f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
            f'COMP_LINE="{" ".join(words)}"; COMP_POINT=${{#COMP_LINE}}; '
            '_stallwatch stallwatch "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"; '
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.split()

    assert {"run", "check", "status"} <= set(complete("stallwatch", ""))
    assert set(complete("stallwatch", "--log-format", "")) == {"text", "json"}
    assert "--duration" in complete("stallwatch", "check", "--d")


def test_rpm_findings_are_only_the_justified_ones(built, tmp_path):
    config = tmp_path / "rpmlint.toml"
    config.write_text(RPMLINT_CONFIG)
    result = subprocess.run(
        ["rpmlint", "--config", str(config), str(built["rpm"])], capture_output=True, text=True, timeout=300
    )
    found = {
        line.split(": ", 1)[1].strip()
        for line in result.stdout.splitlines()
        if line.startswith("stallwatch.")
    }
    assert found == RPMLINT_ACCEPTED, result.stdout


def test_rpm_holds_what_the_deb_holds_with_the_config_kept_on_upgrade(built):
    rpm = built["rpm"]
    listed = set(rpm_query(rpm, "--list").split())
    deb = set(deb_files(built["deb"]))
    # Debian-only: the changelog, the copyright file and lintian's overrides;
    # zsh completions live in a different directory on each.
    debian_only = {p for p in deb if p.startswith(("/usr/share/lintian/", "/usr/share/doc/stallwatch/c"))}
    zsh = {"/usr/share/zsh/vendor-completions/_stallwatch": "/usr/share/zsh/site-functions/_stallwatch"}
    assert listed == {zsh.get(p, p) for p in deb - debian_only}
    flags = dict(
        line.split(" ", 1) for line in rpm_query(rpm, "--queryformat", "[%{FILENAMES} %{FILEFLAGS:fflags}\\n]").splitlines()
    )
    assert set(flags["/etc/stallwatch/config.toml"]) == {"c", "n"}, "%config(noreplace)"
    assert rpm_query(rpm, "--queryformat", "%{URL}") == "https://github.com/stallwatch/stallwatch"


HELPER = "/usr/lib/systemd/systemd-update-helper"


@pytest.mark.parametrize(
    "tag, arg, with_helper, without_helper",
    [
        # %systemd_post: preset (enable where the presets say so) on first install only.
        ("POSTIN", "1", ["install-system-units stallwatch.service"], ["--no-reload preset stallwatch.service"]),
        ("POSTIN", "2", [], []),
        # %systemd_preun: disable and stop on removal, not on upgrade.
        ("PREUN", "0", ["remove-system-units stallwatch.service"], ["--no-reload disable --now stallwatch.service"]),
        ("PREUN", "1", [], []),
        # %systemd_postun_with_restart: restart after an upgrade, not on removal.
        ("POSTUN", "1", ["mark-restart-system-units stallwatch.service"], ["daemon-reload", "try-restart stallwatch.service"]),
        ("POSTUN", "0", [], []),
    ],
)
def test_rpm_scriptlets_do_what_the_systemd_macros_do(built, tmp_path, tag, arg, with_helper, without_helper):
    """Each scriptlet run by /bin/sh with rpm's argument (the package's
    instances after the transaction), once where systemd-update-helper exists
    (systemd 249 and later, where it does the work) and once where it does
    not (older systemd: systemctl directly). Stand-ins record the calls."""
    body = rpm_query(built["rpm"], "--queryformat", f"%{{{tag}}}")
    assert HELPER in body
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("systemctl", "systemd-update-helper"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / name}.calls\n')
        (bin_dir / name).chmod(0o755)

    def run(helper):
        for name in ("systemctl", "systemd-update-helper"):
            (tmp_path / f"{name}.calls").unlink(missing_ok=True)
        result = subprocess.run(
            ["/bin/sh", "-c", body.replace(HELPER, str(helper)), tag, arg],
            env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"),
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        calls = {}
        for name in ("systemctl", "systemd-update-helper"):
            f = tmp_path / f"{name}.calls"
            calls[name] = f.read_text().splitlines() if f.exists() else []
        return calls

    assert run(bin_dir / "systemd-update-helper") == {"systemctl": [], "systemd-update-helper": with_helper}
    assert run(tmp_path / "absent") == {"systemctl": without_helper, "systemd-update-helper": []}
