"""Minimal stand-in for the `expecttest` package, which Debian does not ship but
torch.testing._internal.common_utils imports. The distributed tests use none of its inline
expectation machinery; assertExpectedInline is an exact comparison here (no rewriting)."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertEqual(actual, expect)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        with self.assertRaises(exc_type) as ctx:
            callable(*args, **kwargs)
        self.assertEqual(str(ctx.exception), expect)
