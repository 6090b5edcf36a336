#!/usr/bin/env python3
"""Unit tests of hack/release-checks.py (make release-checks, part of make
test): the chart-version check on a copy of the repository's chart (a change
without a bump fails; a bump is recorded once; versions only rise), the image
repository agreement, the CHANGELOG's form, and the repository itself
passing."""

import importlib.util
import os
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
spec = importlib.util.spec_from_file_location("release_checks", os.path.join(HERE, "release-checks.py"))
rc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rc)

CHANGELOG = """# Changelog

## [Unreleased]

- next

## [1.1.0] - 2027-01-02

### Added

- b

## [1.0.0] - 2027-01-01

- a

[Unreleased]: https://example.com/compare/v1.1.0...HEAD
[1.1.0]: https://example.com/compare/v1.0.0...v1.1.0
[1.0.0]: https://example.com/tree/v1.0.0
"""


class Repo:
    """A copy of the files the checks read, in a temporary directory."""

    def __init__(self, test):
        self.dir = tempfile.TemporaryDirectory()
        test.addCleanup(self.dir.cleanup)
        self.root = self.dir.name
        shutil.copytree(os.path.join(ROOT, "charts"), os.path.join(self.root, "charts"), symlinks=True)
        shutil.copytree(os.path.join(ROOT, "manifests"), os.path.join(self.root, "manifests"))
        for f in ("Makefile", "CHANGELOG.md"):
            shutil.copy(os.path.join(ROOT, f), os.path.join(self.root, f))

    def path(self, rel):
        return os.path.join(self.root, rel)

    def edit(self, rel, old, new):
        text = rc.read(rel, self.root)
        assert old in text, (rel, old)
        with open(self.path(rel), "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))

    def append(self, rel, text):
        with open(self.path(rel), "a", encoding="utf-8") as f:
            f.write(text)


def bump(version):
    major, minor, patch = rc.semver(version)
    return f"{major}.{minor}.{patch + 1}"


class ChartVersion(unittest.TestCase):
    def setUp(self):
        self.repo = Repo(self)
        self.version = rc.chart_version(self.repo.root)

    def test_the_copy_passes(self):
        self.assertEqual(rc.check_chart(self.repo.root), self.version)

    def test_a_change_without_a_bump_fails_and_says_what_to_do(self):
        for rel, old, new in [
            ("charts/kcm-rs/values.yaml", "replicas: 2", "replicas: 3"),
            ("charts/kcm-rs/templates/deployment.yaml", "revisionHistoryLimit: 3", "revisionHistoryLimit: 4"),
            # Through the files/monitoring link.
            ("manifests/monitoring/prometheusrule.yaml", "KcmRsDown", "KcmRsGone"),
        ]:
            with self.subTest(rel=rel):
                repo = Repo(self)
                repo.edit(rel, old, new)
                with self.assertRaisesRegex(rc.Problem, f"charts/kcm-rs changed since version {self.version} was recorded.*bump `version`.*make chart-version"):
                    rc.check_chart(repo.root)

    def test_a_bump_is_recorded_once_and_then_passes(self):
        r = self.repo
        r.edit("charts/kcm-rs/values.yaml", "replicas: 2", "replicas: 3")
        new = bump(self.version)
        r.edit("charts/kcm-rs/Chart.yaml", f"version: {self.version}", f"version: {new}")
        with self.assertRaisesRegex(rc.Problem, f"chart version {new} is not recorded: run `make chart-version`"):
            rc.check_chart(r.root)
        rc.record_chart(r.root)
        with self.assertRaisesRegex(rc.Problem, f"UPGRADING.md has no `## {new}` section"):
            rc.check_chart(r.root)
        r.append("charts/kcm-rs/UPGRADING.md", f"\n## {new}\n\nthree replicas\n")
        with self.assertRaisesRegex(rc.Problem, "changed since version"):
            rc.check_chart(r.root)  # UPGRADING.md is one of the chart's files
        with open(r.path(rc.VERSIONS), encoding="utf-8") as f:
            lines = f.read().splitlines()
        with open(r.path(rc.VERSIONS), "w", encoding="utf-8") as f:
            f.write("\n".join(lines[:-1]) + "\n")
        rc.record_chart(r.root)
        self.assertEqual(rc.check_chart(r.root), new)
        r.edit("charts/kcm-rs/values.yaml", "replicas: 3", "replicas: 4")
        with self.assertRaisesRegex(rc.Problem, "bump the chart's version instead"):
            rc.record_chart(r.root)

    def test_versions_only_rise(self):
        r = self.repo
        r.edit("charts/kcm-rs/Chart.yaml", f"version: {self.version}", "version: 0.0.9")
        with self.assertRaisesRegex(rc.Problem, "is not above the last recorded"):
            rc.check_chart(r.root)
        with self.assertRaisesRegex(rc.Problem, "is not above the last recorded"):
            rc.record_chart(r.root)
        r.edit("charts/kcm-rs/Chart.yaml", "version: 0.0.9", "version: 1.0")
        with self.assertRaisesRegex(rc.Problem, "not a version X.Y.Z"):
            rc.check_chart(r.root)
        r.edit("charts/kcm-rs/Chart.yaml", "version: 1.0", f"version: {self.version}")
        r.append(rc.VERSIONS, "0.0.1 sha256:00\n")
        with self.assertRaisesRegex(rc.Problem, "must rise line by line"):
            rc.check_chart(r.root)


class ImageRepository(unittest.TestCase):
    def test_named_once_everywhere(self):
        r = Repo(self)
        repo = rc.check_image_repository(r.root)
        r.edit("manifests/base/kustomization.yaml", f"newName: {repo}", "newName: example.com/other")
        with self.assertRaisesRegex(rc.Problem, "newName is example.com/other, not the Makefile's"):
            rc.check_image_repository(r.root)
        r = Repo(self)
        r.edit("charts/kcm-rs/values.yaml", f"repository: {repo}", "repository: kcm-rs")
        with self.assertRaisesRegex(rc.Problem, "image.repository is kcm-rs"):
            rc.check_image_repository(r.root)


class KcmFlag(unittest.TestCase):
    def test_the_docs_keep_bootstrapsigner_and_tokencleaner(self):
        r = Repo(self)
        os.makedirs(r.path("docs"))
        with open(r.path("README.md"), "w", encoding="utf-8") as f:
            f.write("```\nkube-controller-manager --controllers=*,bootstrapsigner,tokencleaner,-job-controller\n```\n")
        self.assertGreaterEqual(rc.check_kcm_flags(r.root), 2)  # README and NOTES.txt
        with open(r.path("docs/install.md"), "w", encoding="utf-8") as f:
            f.write("set `--controllers=*,-job-controller,-disruption-controller` in KCM\n")
        with self.assertRaisesRegex(rc.Problem, r"docs/install.md:1: --controllers=\*,-job-controller,-disruption-controller drops bootstrapsigner"):
            rc.check_kcm_flags(r.root)


class Changelog(unittest.TestCase):
    def test_sections_and_notes(self):
        got = rc.changelog_sections(CHANGELOG)
        self.assertEqual([(v, d) for v, d, _ in got], [("Unreleased", None), ("1.1.0", "2027-01-02"), ("1.0.0", "2027-01-01")])
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        with open(os.path.join(d.name, "CHANGELOG.md"), "w", encoding="utf-8") as f:
            f.write(CHANGELOG)
        self.assertEqual(rc.notes("1.1.0", d.name), "## kcm-rs 1.1.0 (2027-01-02)\n\n### Added\n\n- b\n")
        with self.assertRaisesRegex(rc.Problem, r"no `## \[2.0.0\] - YYYY-MM-DD` section"):
            rc.notes("2.0.0", d.name)

    def test_what_is_refused(self):
        cases = [
            (CHANGELOG.replace("## [Unreleased]", "## Unreleased"), "is not `## \\[Unreleased\\]`"),
            (CHANGELOG.replace("## [Unreleased]\n\n- next\n\n", ""), "first section must be"),
            (CHANGELOG.replace("[1.1.0] - 2027-01-02", "[1.1.0]"), "needs its release date"),
            (CHANGELOG.replace("[1.1.0] - 2027-01-02", "[0.9.0] - 2027-01-02").replace("[1.1.0]:", "[0.9.0]:"), "not below the section before"),
            (CHANGELOG.replace("[1.0.0]: https://example.com/tree/v1.0.0\n", ""), "no link reference for 1.0.0"),
        ]
        for text, why in cases:
            with self.subTest(why=why), self.assertRaisesRegex(rc.Problem, why):
                rc.changelog_sections(text)


class ThisRepository(unittest.TestCase):
    def test_passes(self):
        self.assertEqual(len(rc.check()), 5)


if __name__ == "__main__":
    unittest.main()
