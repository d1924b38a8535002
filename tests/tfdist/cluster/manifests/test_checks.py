"""Tests for tfdist.cluster.manifests.checks: YAML through PyYAML's safe dumper."""

import yaml
from absl.testing import absltest

from tfdist.cluster import manifests


class ToYamlTest(absltest.TestCase):
    def test_tricky_scalars_read_back(self):
        value = {
            "strings": [
                "yes",
                "No",
                "on",
                "null",
                "~",
                "1.5",
                "0x1f",
                "-1",
                ".inf",
                "a: b",
                "#c",
                "- d",
                "",
                " lead",
                "tab\there",
                "line\nbreak",
                "é😀",
                'quote " and \\',
                "*alias",
                "&anchor",
                "!tag",
                "%directive",
                "@at",
                "`tick",
                "key: {flow}",
                "[list]",
                "2024-01-01",
                "0o17",
                "1e3",
                "NaN",
                "-.inf",
                "+1",
                "0b1",
            ],
            "numbers": [0, -3, 2222],
            "flags": [True, False, None],
            "empty": {"list": [], "map": {}},
            "nested": [[1, 2], [{"k": "v"}]],
        }
        text = manifests.to_yaml(value)
        self.assertEqual(yaml.safe_load(text), value)
        self.assertTrue(text.isascii())

    def test_strings_that_read_as_other_types_are_double_quoted(self):
        text = manifests.to_yaml(["yes", "null", "1.5", "0x1f", "plain", "/abs/path"])
        self.assertEqual(
            text.splitlines(),
            ['- "yes"', '- "null"', '- "1.5"', '- "0x1f"', "- plain", '- "/abs/path"'],
        )

    def test_shared_values_are_written_out_not_aliased(self):
        shared = ["tfdist", "train"]
        text = manifests.to_yaml({"a": shared, "b": shared})
        self.assertNotIn("&", text)
        self.assertNotIn("*", text)
        self.assertEqual(yaml.safe_load(text), {"a": shared, "b": shared})

    def test_long_strings_stay_on_one_line(self):
        value = ["--flag=" + "x" * 300]
        self.assertLen(manifests.to_yaml(value).splitlines(), 1)


if __name__ == "__main__":
    absltest.main()
