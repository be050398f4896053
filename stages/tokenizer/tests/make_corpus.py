#!/usr/bin/env python3
"""Write tests/corpus.jsonl: one JSON string per line, the texts the tokenizer is checked on.

Deterministic (seeded, no network, stdlib only): rerunning gives a byte-identical file.
JSON lines rather than plain lines so texts can hold \\n, \\r\\n and any other character.

    python3 stages/tokenizer/tests/make_corpus.py > stages/tokenizer/tests/corpus.jsonl
"""
import json
import random
import sys
import unicodedata

rng = random.Random(20261129)

EN_WORDS = (
    "the of and to in is was for on that with as by at it from his an be this are which or had "
    "not but have were they one their all been has more there when who would can about into "
    "than other time only new some could these two may then first any like now my such over "
    "also most after made did many before must through years where much way well down should "
    "because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three "
    "package install license software warranty copyright distribute modify permission notice "
    "customer invoice refund shipping order account password escalate supervisor urgent "
    "tokenizer encoder inference quantization benchmark throughput latency checkpoint"
).split()

EN_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you're right, but we'll see what they've decided; he'd know, she'll tell.",
    "IT'S A TRAP! Don't panic... isn't it obvious? Y'all can't be serious!!!",
    "My account was closed without warning and I need my invoices for a tax audit tomorrow.",
    "WIN a FREE cruise!!! Click the link now to claim your prize.",
    "Version 2.0.1 was released on 2024-03-15 at 10:30 (UTC+01:00).",
    "Call +1 (555) 012-3456 or e-mail support@example.com before 5pm.",
    "Prices: $19.99, EUR 5,00, 100% off, 3/4 cup, 1e-07, -0.5, 12345678901.",
    "She said \"hello\" and 'goodbye' -- then left -> quickly <- slowly.",
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software.",
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.",
    "See https://example.org/path?query=1&x=y#frag for details.",
    "Rock'n'roll isn't dead; it's 'just' resting -- o'clock, ma'am, rock ’n’ roll’s curly.",
    "snake_case, camelCase, PascalCase, kebab-case, SCREAMING_SNAKE, __dunder__.",
    "C++ and C# and F# are languages; so is Go. x += 1; y = x ** 2 // 3 != 4.",
]

FR_SENTENCES = [
    "Les paquets ont été installés; déjà vu à Noël, garçon!",
    "Bonjour, ma commande n'est jamais arrivée et le suivi indique « livré » depuis jeudi.",
    "Pouvez-vous vérifier ? Merci d'avance, Hélène",
    "Quel service doit traiter la demande ?",
    "problèmes de connexion à l'appli ; colis égarés ou abîmés",
    "L'été dernier, j'ai mangé une crème brûlée à Montréal — c'était où ?",
    "Ça coûte 12,50 € TTC ; l'œuvre d'Œdipe est à côté du cæcum.",
    "Élève, ÉCOLE, À bientôt, Ô désespoir, ÇA VA ? Où êtes-vous allés ?",
    "Il faut qu'il aille chez lui parce qu'aujourd'hui c'est férié.",
    "« Guillemets » et ‹ chevrons › ; points de suspension… et tiret – cadratin —.",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Noël, naïf, Zoë, Citroën, maïs, Haïti, ambiguë, aiguë.",
]

FR_WORDS = (
    "le la les un une des et est à de du en dans pour avec sur par pas plus ne que qui été "
    "être avoir fait très où déjà après même français élève forêt hôpital château garçon "
    "façade reçu naïve œuvre sœur cœur nœud ça voilà là-bas peut-être aujourd'hui c'est "
    "qu'il n'est l'appli d'avance j'ai s'il paiements avoirs remboursements livraison"
).split()

EMOJI = [
    "😀", "😡", "💔", "📦", "👎🏽", "👍🏻", "👋🏿", "🤔", "🎉", "🔥", "✅", "❤️", "❤", "☺️",
    "👨‍👩‍👧", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑🏾‍🤝‍🧑🏼", "🏳️‍🌈", "🏴‍☠️", "🇫🇷", "🇯🇵", "🇺🇸",
    "1️⃣", "#️⃣", "*️⃣", "©️", "™️", "🫠", "🥲", "🦄", "🧬", "🪐", "🤷‍♀️", "🙋🏻‍♂️",
]

CJK = [
    "你好，世界！这是一个测试。", "我喜欢吃苹果和香蕉。", "東京都渋谷区で会いましょう。",
    "ひらがなとカタカナ、漢字が混ざった文章です。", "ｶﾀｶﾅ ﾊﾝｶｸ", "안녕하세요, 세계!",
    "한국어 문장입니다. 감사합니다.", "全角：ＡＢＣ１２３！？", "中文标点：“引号”、《书名》……",
    "漢字かな交じり文、　全角スペース付き。",
]

OTHER_SCRIPTS = [
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε! ΑΒΓΔ αβγδ ς.",
    "مرحبا بالعالم! ١٢٣٤٥ ٫ ٬",
    "שלום עולם! בְּרֵאשִׁית",
    "नमस्ते दुनिया! हिन्दी में परीक्षण १२३",
    "สวัสดีชาวโลก ภาษาไทย",
    "Tiếng Việt có nhiều dấu: ắ ằ ẳ ẵ ặ ế ề ể ễ ệ ố ồ ổ ỗ ộ.",
    "Ⅻ ⅻ ½ ¾ ² ³ ⁴ ₅ ① ⑩ ㊿ 𝟙𝟚𝟛 𝐀𝐁𝐂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "ﬁ ﬂ ﬀ Å Ω K ẛ̣ ǅ ǈ ǋ",
]

WHITESPACE = [
    "tab\there", "\tleading tab", "trailing tab\t", "two  spaces", "three   spaces",
    "many          spaces", "trailing space ", "trailing spaces   ", " leading space",
    "   leading spaces", "line\nbreak", "crlf\r\nline", "cr\ronly", "\n\nblank lines\n\n",
    "mixed \t \n \r\n end", "nbsp\u00a0here", "nbsp \u00a0 around", "ideographic\u3000space",
    "ideo\u3000\u3000double", "thin\u2009space", "en\u2002quad\u2000", "line\u2028sep",
    "para\u2029sep", "nel\u0085char", "zwsp\u200bnot space", "zwj\u200dzwnj\u200c",
    "bom\ufeffinside", "vt\x0bff\x0c", "ctrl\x1c\x1d\x1e\x1f chars", "nul\x00byte", "del\x7fchar",
    " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", " \t ", "a", "I", "'", "''", "'s", " 's",
    "x 'll", "   \t\t\n  x", "x\n \n", "end\u00a0 ", "\u202f\u205f\u1680", "a \u00a0b",
]

SPECIALS = [
    "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "[CLS] [SEP] [PAD] [UNK]",
    " [MASK] ", "  [MASK]  ", "x[MASK]y", "The answer is [MASK].", "[MASK][MASK]",
    "[[MASK]]", "[MASK", "MASK]", "[mask]", "[ MASK ]", "[CLS]hello[SEP]world[SEP]",
    "\t[MASK]\n", "[MASK]\u00a0[MASK]", "é[MASK]é", "e\u0301[MASK]\u0301", "[CLS]  [SEP]",
    "{\"[MASK]\": \"[MASK]\"}", "[PAD][PAD][PAD]", "[UNK] token", "[SEP] . [CLS]",
]

PUNCT = [
    "!!!???", "...", "…", "--->", "<-->", "«»", "—", "–", "!?!?", "((()))", "[]{}<>",
    "@#$%^&*", "~`|\\", "::", ";;", "''\"\"", "``quotes''", "a.b.c", "e.g. i.e. etc.",
    "$$$", "%%", "__init__", "#hashtag", "@mention", "http://x.y/z", "C:\\path\\to\\file.txt",
    "/usr/local/bin", "a/b\\c", "1+1=2", "x^2", "<b>bold</b>", "&amp; &lt; &#39;",
]

DIGITS = [
    "0", "1", "12", "123", "1234", "12345", "123456789012345678901234567890",
    "3.14159265", "100.0", "0.1", "1e-07", "-42", "+7", "1,000,000", "1 000 000", "2024-11-29",
    "10:30:00", "v1.2.3", "0x1F", "0b1010", "42nd", "1st 2nd 3rd 4th", "٣٤٥", "१२३", "½",
]

COMBINING = [
    "a\u0301\u0316", "a\u0316\u0301", "e\u0301\u0301", "o\u0308\u0304", "u\u0308\u0301",
    "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "A\u030a", "\u212b",
    "\u0041\u0300\u0320", "\u03b1\u0313\u0301", "\u0627\u0653", "\u0915\u093c",
    "\u00e9\u0301", "n\u0303o\u0303", "\u0301alone", "x\u20dd", "q\u0307\u0323",
]


def en_sentence():
    n = rng.randint(3, 18)
    words = [rng.choice(EN_WORDS) for _ in range(n)]
    if rng.random() < 0.5:
        words[0] = words[0].capitalize()
    if rng.random() < 0.2:
        words.insert(rng.randint(0, n), rng.choice(["I'm", "don't", "it's", "we've", "they'll",
                                                     "you'd", "she's", "can't", "O'Brien"]))
    if rng.random() < 0.2:
        words.insert(rng.randint(0, n), str(rng.randint(0, 10 ** rng.randint(1, 9))))
    sep = rng.choice([" ", " ", " ", ", ", "  ", " - "])
    return sep.join(words) + rng.choice([".", "!", "?", "", "...", ";", ":"])


def fr_sentence():
    n = rng.randint(3, 15)
    words = [rng.choice(FR_WORDS) for _ in range(n)]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", " !", " ?", " ;", "…"])


def random_json():
    def value(depth):
        kind = rng.randint(0, 7 if depth < 3 else 4)
        if kind == 0:
            return rng.randint(-10 ** 6, 10 ** 12)
        if kind == 1:
            return rng.choice([0.1, 3.14159265, 1e-07, 100.0, -2.5, 1e21])
        if kind == 2:
            return rng.choice([True, False, None])
        if kind in (3, 4):
            return rng.choice([en_sentence(), fr_sentence(), rng.choice(EMOJI), "", "[MASK]",
                               rng.choice(CJK)])
        if kind in (5, 6):
            return {rng.choice(EN_WORDS + FR_WORDS): value(depth + 1)
                    for _ in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    v = value(0)
    style = rng.randint(0, 3)
    if style == 0:
        return json.dumps(v)
    if style == 1:
        return json.dumps(v, ensure_ascii=False)
    if style == 2:
        return json.dumps(v, ensure_ascii=False, indent=2)
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def random_unicode_mix():
    blocks = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
              (0x590, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x1e00, 0x1fff),
              (0x2000, 0x206f), (0x2070, 0x218f), (0x2460, 0x24ff), (0x3000, 0x30ff),
              (0x4e00, 0x4fff), (0xac00, 0xadff), (0xff00, 0xffef), (0x1f300, 0x1faff),
              (0x1d400, 0x1d7ff), (0x10000, 0x100ff), (0xe0000, 0xe007f)]
    out = []
    for _ in range(rng.randint(1, 30)):
        lo, hi = rng.choice(blocks)
        cp = rng.randint(lo, hi)
        out.append(chr(cp))
        if rng.random() < 0.3:
            out.append(rng.choice([" ", "  ", "\t", "\n", "a", "1", "'", "'s", "\u00a0"]))
    return "".join(out)


def main():
    lines = []
    lines += EN_SENTENCES + FR_SENTENCES + CJK + OTHER_SCRIPTS + WHITESPACE + SPECIALS + PUNCT
    lines += DIGITS + COMBINING + EMOJI
    # French and other accented text in NFD too (the tokenizer must give the NFC ids).
    for s in FR_SENTENCES + OTHER_SCRIPTS + CJK + COMBINING:
        lines.append(unicodedata.normalize("NFD", s))
        lines.append(unicodedata.normalize("NFKC", s))
    for _ in range(350):
        lines.append(en_sentence())
    for _ in range(200):
        s = fr_sentence()
        lines.append(s)
        lines.append(unicodedata.normalize("NFD", s))
    for _ in range(120):
        lines.append(random_json())
    for _ in range(120):
        lines.append(random_unicode_mix())
    # Emoji and specials inside sentences.
    for _ in range(80):
        s = en_sentence().split(" ")
        for _ in range(rng.randint(1, 3)):
            s.insert(rng.randint(0, len(s)), rng.choice(EMOJI + SPECIALS))
        lines.append(rng.choice([" ", "", "  "]).join(s))
    # Whitespace mutations of ordinary sentences.
    for _ in range(80):
        s = list(en_sentence())
        for _ in range(rng.randint(1, 4)):
            s.insert(rng.randint(0, len(s)), rng.choice(
                [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", " \t", "\n\n", "   "]))
        lines.append("".join(s))
    # A few long lines (several kB) to exercise long words and runs.
    lines.append(" ".join(en_sentence() for _ in range(60)))
    lines.append("a" * 3000)
    lines.append(" " * 500 + "x" + "\t" * 200)
    lines.append("".join(rng.choice("0123456789") for _ in range(2000)))
    lines.append("!" * 1000 + "é" * 500)
    lines.append("😀" * 300)
    out = sys.stdout
    for s in lines:
        out.write(json.dumps(s, ensure_ascii=True) + "\n")
    print(f"{len(lines)} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
