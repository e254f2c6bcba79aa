#!/usr/bin/env python3
"""Writes samples/data/tales.txt: the built-in training text of shardc's
token samples (byte-level, vocab 256).

Short animal tales assembled from hand-written sentence templates by a fixed
linear congruential generator, so the output is the same on every machine and
Python version.  The templates and word lists are original to shardc and
dedicated to the public domain (CC0).  About 240 KB: big enough that the tiny
GPT does not memorize it in a few hundred steps, small enough to keep in git.

    python3 samples/data/gen_tales.py > samples/data/tales.txt
"""
import sys

SEED = 20240521
TALES = 600


class Lcg:
    def __init__(self, seed):
        self.s = seed & 0xFFFFFFFFFFFFFFFF

    def next(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return self.s >> 33

    def pick(self, xs):
        return xs[self.next() % len(xs)]

    def chance(self, percent):
        return self.next() % 100 < percent


ANIMALS = ["fox", "rabbit", "owl", "bear", "mouse", "hedgehog", "otter", "badger", "crow",
           "deer", "squirrel", "frog", "duck", "wolf", "goat", "cat", "dog", "heron",
           "beaver", "lark"]
NAMES = ["Pip", "Rosa", "Tom", "Mira", "Bram", "Lily", "Finn", "Ada", "Olf", "Nell", "Kit",
         "Hugo", "Wren", "Moss", "Ivy", "Basil", "Clover", "Juno", "Rowan", "Tess"]
PLACES = ["a hollow oak", "a little burrow", "a house of reeds", "a nest of twigs",
          "a cave under the hill", "a cottage by the mill", "a hut of stones",
          "a warm den under the roots"]
NEAR = ["the river", "the old bridge", "the dark forest", "the wheat field", "the quiet lake",
        "the tall mountain", "the village well", "the marsh", "the meadow", "the sea"]
LIKES = ["gather berries", "watch the clouds", "sing songs", "count the stars",
         "build small boats", "read old maps", "bake bread", "catch fish", "plant seeds",
         "tell stories", "climb trees", "collect shiny stones"]
WEATHER = ["the sun was bright", "the rain fell softly", "a cold wind blew",
           "the snow lay deep", "the fog was thick", "the sky was clear and blue",
           "a storm was coming"]
TROUBLES = ["lost the key to the gate", "could not find the way home",
            "had no food for the winter", "broke the old lantern",
            "heard a strange noise in the night", "saw the bridge fall into the water",
            "forgot the words of the song", "found a bird with a hurt wing"]
HELPS = ["asked a wise old {a} for advice", "walked all day to the far hill",
         "worked late into the night", "shared the last piece of bread",
         "called every friend in the wood", "followed the tracks in the mud",
         "made a plan with {n} the {a}", "waited by the water until morning"]
ENDS = ["At last everything was well again.", "From that day on, they were good friends.",
        "And the whole wood was glad.", "So the winter passed in peace.",
        "It was the best day of the year.", "Nobody ever forgot that night.",
        "And they laughed about it for a long time."]
MORALS = ["A friend in need is a friend indeed.", "Slow and steady wins the race.",
          "Kindness is never wasted.", "Many hands make light work.",
          "Look before you leap.", "Patience brings its own reward.",
          "Honesty is the best policy.", "Small things can matter a great deal."]
SAYS = ["\"We can do this together,\" said {n}.", "\"Do not be afraid,\" said {n}.",
        "\"I have an idea,\" said {n} with a smile.", "\"Let us try once more,\" said {n}.",
        "\"Thank you, my friend,\" said {n}.", "\"What shall we do now?\" asked {n}."]


def cap(s):
    return s[0].upper() + s[1:]


def tale(r):
    a, n = r.pick(ANIMALS), r.pick(NAMES)
    b, m = r.pick(ANIMALS), r.pick(NAMES)
    while m == n:
        m = r.pick(NAMES)
    s = []
    s.append("Once upon a time, there was a little %s named %s." % (a, n))
    s.append("%s lived in %s near %s." % (n, r.pick(PLACES), r.pick(NEAR)))
    s.append("Every morning, %s liked to %s." % (n, r.pick(LIKES)))
    if r.chance(60):
        s.append("%s had a friend, %s the %s, who liked to %s." % (n, m, b, r.pick(LIKES)))
    s.append("One day, %s, and %s %s." % (r.pick(WEATHER), n, r.pick(TROUBLES)))
    if r.chance(50):
        s.append(r.pick(SAYS).format(n=r.pick([n, m])))
    s.append("So %s %s." % (n, r.pick(HELPS).format(a=r.pick(ANIMALS), n=m)))
    if r.chance(40):
        s.append("It was not easy, but %s did not give up." % n)
    s.append(r.pick(ENDS))
    if r.chance(50):
        s.append("The moral of the story: " + r.pick(MORALS))
    return " ".join(s)


def main():
    r = Lcg(SEED)
    out = []
    for i in range(TALES):
        out.append(tale(r))
    sys.stdout.write("\n\n".join(out) + "\n")


if __name__ == "__main__":
    main()
