/* JSON typed by a person: parsed, and on a syntax error the line and column of the fault
   (browsers' JSON.parse messages do not all say where). */

/* A small recursive-descent scan that finds the offset of the first syntax error. */
class Scanner {
  constructor(text) {
    this.text = text;
    this.i = 0;
  }
  fail() {
    throw this.i;
  }
  ws() {
    while (this.i < this.text.length && " \t\n\r".includes(this.text[this.i])) this.i++;
  }
  expect(ch) {
    this.ws();
    if (this.text[this.i] !== ch) this.fail();
    this.i++;
  }
  literal(word) {
    if (!this.text.startsWith(word, this.i)) this.fail();
    this.i += word.length;
  }
  string() {
    this.i++;
    while (this.i < this.text.length && this.text[this.i] !== '"') this.i += this.text[this.i] === "\\" ? 2 : 1;
    if (this.i >= this.text.length) this.fail();
    this.i++;
  }
  number() {
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.text.slice(this.i));
    if (!m || !m[0]) this.fail();
    this.i += m[0].length;
  }
  sequence(close, item) {
    this.i++;
    this.ws();
    if (this.text[this.i] === close) return void this.i++;
    for (;;) {
      item();
      this.ws();
      const c = this.text[this.i++];
      if (c === close) return;
      if (c !== ",") this.fail();
    }
  }
  member() {
    this.ws();
    if (this.text[this.i] !== '"') this.fail();
    this.string();
    this.expect(":");
    this.value();
  }
  value() {
    this.ws();
    const c = this.text[this.i];
    if (c === "{") return this.sequence("}", () => this.member());
    if (c === "[") return this.sequence("]", () => this.value());
    if (c === '"') return this.string();
    const word = { t: "true", f: "false", n: "null" }[c];
    return word ? this.literal(word) : this.number();
  }
}

export function jsonErrorOffset(text) {
  const s = new Scanner(text);
  try {
    s.value();
    s.ws();
    return s.i < text.length ? s.i : null;
  } catch (at) {
    return typeof at === "number" ? at : null;
  }
}

/* {value} for valid JSON (empty text: null), else {error} naming the line and column. */
export function parseInput(text) {
  if (!text.trim()) return { value: null };
  try {
    return { value: JSON.parse(text) };
  } catch (err) {
    const at = jsonErrorOffset(text);
    let where = "";
    if (at != null) {
      const before = text.slice(0, at);
      where = ` at line ${before.split("\n").length}, column ${at - before.lastIndexOf("\n")}`;
    }
    return { error: `Input is not valid JSON${where}: ${err.message}` };
  }
}
