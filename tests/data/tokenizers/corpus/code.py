#!/usr/bin/env python3
"""A small module: tokenizers see code too."""
import os, sys
from typing import Dict, List


class Cache(dict):
    def __init__(self, size: int = 1024) -> None:
        super().__init__()
        self.size = size  # max entries

    def get_or_set(self, key: str, fn) -> List[int]:
        if key not in self:
            self[key] = fn(key)
        return self[key]


def main(argv: List[str]) -> int:
	# a tab-indented comment
	counts: Dict[str, int] = {}
	for line in open(argv[1], encoding="utf-8"):
		for word in line.split():
			counts[word] = counts.get(word, 0) + 1
	print(f"{len(counts):>8d} words; top={sorted(counts, key=counts.get)[-3:]!r}")
	return 0 if counts else 1

if __name__ == "__main__":
    sys.exit(main(sys.argv))
