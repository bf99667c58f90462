"""What the tests share: the repository's paths and the test tiers' prerequisites (env), a
valid stack manifest to vary (stacks), the lab's per-suite settings (lab), a simulated node
run from a temporary directory (simnode) and the readers of real tools' text that tests
compare against (toolparse).

Tests import from here, never from conftest; conftest holds only pytest's hooks and the
shared fixtures.
"""
