"""Verify of scenario preflight: what the role left on every node, read from the node.

prepare.yml left the probe package unpacked and not configured (a killed dpkg run); the role
must have finished it with `dpkg --configure -a` exactly once (its second run finds dpkg in
order), and left dpkg and apt usable: no audit finding, no lock held.
"""

from __future__ import annotations

LOCKS = (
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
)


def test_the_interrupted_package_was_configured_once(host) -> None:
    probe = host.package("kubegpu-molecule-probe")
    assert probe.is_installed
    status = host.check_output("dpkg-query -W -f='${Status}' kubegpu-molecule-probe")
    assert status == "install ok installed"
    # The postinst appends one line per configure: one run, and only one, configured it.
    marker = host.file("/var/lib/kubegpu-molecule-probe.configured")
    assert marker.exists
    assert marker.content_string == "configured\n"


def test_dpkg_has_nothing_left_to_finish(host) -> None:
    audit = host.run("dpkg --audit")
    assert audit.rc == 0
    assert audit.stdout.strip() == ""
    assert host.file("/var/lib/dpkg/updates").listdir() == []


def test_no_package_lock_is_held(host) -> None:
    # dpkg and apt take fcntl locks: take each one without waiting, as apt would.
    script = (
        "import fcntl, sys\n"
        "for path in sys.argv[1:]:\n"
        "    with open(path, 'w') as f:\n"
        "        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    )
    result = host.run("python3 -c %s" + " %s" * len(LOCKS), script, *LOCKS)
    assert result.rc == 0, result.stderr


def test_apt_still_resolves_the_installed_packages(host) -> None:
    result = host.run("apt-get check -q")
    assert result.rc == 0, result.stdout + result.stderr
