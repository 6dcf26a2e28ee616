#!/usr/bin/env python3
"""The training text: Debian's `fortunes` package (1:1.99.1-7.3, BSD licence: see its
usr/share/doc/fortunes/copyright), every English cookie file but the ASCII art and the translation
exercises. Each fortune is one document. A fixed shuffle puts 5% of them aside as held-out text.

    corpus.py FORTUNES_DIR OUT    # writes OUT/train.txt and OUT/heldout.txt, documents split by "\\n%\\n"
"""

import random
import sys
from pathlib import Path

LEFT_OUT = {"ascii-art", "translate-me"}
HELD_OUT = 0.05
SEED = 20261202


def fortunes(folder):
    for f in sorted(Path(folder).iterdir()):
        if f.suffix in (".dat", ".u8") or f.name in LEFT_OUT or not f.is_file():
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        for doc in text.split("\n%\n"):
            doc = doc.strip("\n%")
            # Tabs become spaces so the vocabulary is spent on words; most cookies indent with them.
            doc = doc.replace("\t", "    ").rstrip()
            if len(doc) >= 20:
                yield doc


def main(folder, out):
    docs = sorted(set(fortunes(folder)))
    random.Random(SEED).shuffle(docs)
    cut = int(len(docs) * HELD_OUT)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "heldout.txt").write_text("\n%\n".join(docs[:cut]) + "\n")
    (out / "train.txt").write_text("\n%\n".join(docs[cut:]) + "\n")
    print(f"{len(docs)} fortunes: {len(docs) - cut} to train on, {cut} held out; "
          f"{sum(map(len, docs[cut:]))} and {sum(map(len, docs[:cut]))} characters")


if __name__ == "__main__":
    main(*sys.argv[1:3])
