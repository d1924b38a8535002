"""Tests for tfdist.cluster.kubernetes_rules: what Kubernetes accepts passes, what it refuses is
named."""

from absl.testing import absltest
from absl.testing import parameterized

from tfdist.cluster import kubernetes_rules as rules

_SHA256 = "sha256:" + "0123456789abcdef" * 4
_NOT_A_LABEL_KEY = 'is not a label key ([prefix/]name, e.g. "cloud.google.com/gke-accelerator")'


def _subdomain(length: int) -> str:
    """A DNS subdomain of `length` characters, of labels of at most 63."""
    labels = ["a" * 63] * (length // 64) + ["b" * (length % 64)]
    return ".".join(label for label in labels if label)


class AcceptedTest(parameterized.TestCase):
    @parameterized.parameters(
        "local",
        "tfdist",
        "registry.example.com/tfdist:0.1.0",
        "localhost:5000/team/img",
        "ghcr.io/org/sub/img:v1.2-rc_3",
        f"img@{_SHA256}",
        f"reg.io:443/a/b:c@{_SHA256}",
        "[::1]:5000/img",
        "a__b/c--d/e.f",
        "Registry.Example.COM/img",
    )
    def test_image_references(self, image):
        self.assertIsNone(rules.image_reference(image))

    @parameterized.parameters(
        ("4", 4),
        ("500m", 0.5),
        ("16Gi", 16 * 2**30),
        ("1e3", 1000),
        ("0.5", 0.5),
        (".5", 0.5),
        ("1.5M", 1.5e6),
        ("+2", 2),
        ("1E2", 100),
        ("100k", 1e5),
    )
    def test_quantities(self, text, amount):
        self.assertEqual(float(rules.quantity_value(text)), amount)

    @parameterized.parameters(
        "/mnt/tfdist", "/data", "/var/lib/runs", "/home/me/runs", "/tmp/pytest-1/mnt"
    )
    def test_mount_paths(self, path):
        self.assertIsNone(rules.mount_path(path))

    @parameterized.parameters(
        "gke-accelerator",
        "cloud.google.com/gke-accelerator",
        "node.kubernetes.io/instance-type",
        "a/b",
        "example.com/" + "n" * 63,
        _subdomain(253) + "/name",
    )
    def test_label_keys(self, key):
        self.assertIsNone(rules.label_key(key))

    def test_names(self):
        self.assertIsNone(rules.dns1035_label("a" * 63))
        self.assertIsNone(rules.dns1123_label("0-a"))
        self.assertIsNone(rules.dns1123_subdomain("a.b-c.d"))
        self.assertIsNone(rules.label_value(""))
        self.assertIsNone(rules.label_key("cloud.google.com/gke-accelerator"))


class RefusedTest(parameterized.TestCase):
    @parameterized.parameters(
        (rules.dns1035_label, "a" * 64, "64 characters"),
        (rules.dns1035_label, "1a", "letter"),
        (rules.dns1123_subdomain, "../../etc", "DNS subdomain"),
        (rules.dns1123_subdomain, "a;b", "DNS subdomain"),
        (rules.dns1123_subdomain, "a" * 254, "more than 253"),
        (rules.label_value, "v" * 64, "more than 63"),
        (rules.label_key, "a/", "label key"),
        (rules.image_reference, "a" * 256, "more than 255"),
        (rules.image_reference, "img@sha256:abcd", "image reference"),
        (rules.image_reference, f"img@{_SHA256[:-2]}", "64 hex digits"),
        (rules.image_reference, "img:", "image reference"),
        (rules.image_reference, None, "image reference"),
        (rules.mount_path, "/mnt/./x", "normalised"),
        (rules.mount_path, "/proc/x", "hide"),
        (rules.mount_path, "/mnt/\x7f", "control character"),
        (rules.mount_path, None, "absolute"),
    )
    def test_problems(self, rule, value, words):
        self.assertIn(words, rule(value))

    @parameterized.named_parameters(
        ("underscore_and_capitals", "Bad_Prefix/name"),
        ("capitals", "Example.com/name"),
        ("leading_dash", "-x.example.com/name"),
        ("trailing_dash", "x.example.com-/name"),
        ("empty_label", "a..b/name"),
        ("space", "a b/name"),
        ("a_slash_too_many", "a/b/name"),
        ("over_253_characters", _subdomain(254) + "/name"),
        ("empty", "/name"),  # Kubernetes: "prefix part must be non-empty".
    )
    def test_label_keys_whose_prefix_is_not_a_dns_subdomain(self, key):
        self.assertEqual(rules.label_key(key), _NOT_A_LABEL_KEY)

    @parameterized.parameters("", "example.com/", "n" * 64, "example.com/" + "n" * 64, None, 1)
    def test_label_keys_whose_name_is_not_a_label(self, key):
        self.assertIn("is not a label key", rules.label_key(key))

    @parameterized.parameters(
        "1e4000", "-1", "1e", "1 Gi", "1gi", "٣", "0x8", "1" * 33, "", "NaN", "inf", None, 1
    )
    def test_not_quantities(self, text):
        self.assertIsNone(rules.quantity_value(text))

    def test_bounds(self):
        self.assertIsNone(rules.quantity("1m", least="1m", most="2"))
        self.assertEqual(rules.quantity("1e-4", least="1m", most="2"), "is outside 1m to 2")
        self.assertEqual(rules.quantity("3", least="1m", most="2"), "is outside 1m to 2")


if __name__ == "__main__":
    absltest.main()
