"""PTX text -> `Module` (see ir.py). Covers what nvcc emits for `.entry` kernels.

Grammar handled (a subset of the PTX ISA, enough for nvcc output):
  module     := (directive | linkage? (entry | func | vardecl))*
  directive  := .version X.Y | .target a[, b...] | .address_size N | .file ... | .loc ...
  entry      := .entry NAME ( param, ... )? perf-directive* { body }
  body       := ( .reg | .local/.shared decl | .pragma | LABEL: | { body } | instruction ; )*
  instruction:= (@[!]%p)? opcode.mod.type operand (, operand)*
  operand    := %reg | %reg|%p | imm | 0fXXXXXXXX | sym | [base(+-imm)?] | {op, ...} | _
`.func` bodies are parsed (so the rest of the module still parses) but recorded as unsupported;
the validator reports them. Errors raise PTXSyntaxError with the line number.
"""
from __future__ import annotations

import re

from gpu_layers.errors import PTXSyntaxError
from gpu_layers.ptx.ir import (
    TYPE_BITS, Addr, FImm, Guard, Imm, Instruction, Kernel, Module, Pair, Param, Reg, RegDecl,
    Sink, Sym, Vec, VarDecl,
)

_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<string>"[^"\n]*")
  | (?P<fimm>0[fF][0-9a-fA-F]{8}(?![0-9a-zA-Z_])|0[dD][0-9a-fA-F]{16}(?![0-9a-zA-Z_]))
  | (?P<num>0[xX][0-9a-fA-F]+U?|0[bB][01]+U?|[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+(?:[eE][+-]?[0-9]+)?U?)
  | (?P<ident>[%$A-Za-z_.][A-Za-z0-9_$.%]*)
  | (?P<punct>[,;:{}\[\]()+\-|!@<>=*])
""", re.VERBOSE | re.DOTALL)


class _Tok:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind, text, line):
        self.kind, self.text, self.line = kind, text, line

    def __repr__(self):
        return f"{self.kind}:{self.text!r}@{self.line}"


def tokenize(text: str) -> list:
    toks = []
    line = 1
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise PTXSyntaxError(f"line {line}: unexpected character {text[pos]!r}")
        kind = m.lastgroup
        s = m.group()
        if kind == "nl":
            toks.append(_Tok("nl", s, line))
            line += 1
        elif kind == "bcomment":
            line += s.count("\n")
        elif kind not in ("ws", "lcomment"):
            toks.append(_Tok(kind, s, line))
        pos = m.end()
    toks.append(_Tok("eof", "", line))
    return toks


def parse_int(text: str, line: int) -> int:
    t = text[:-1] if text.endswith("U") else text
    try:
        if t[:2] in ("0x", "0X"):
            return int(t[2:], 16)
        if t[:2] in ("0b", "0B"):
            return int(t[2:], 2)
        if len(t) > 1 and t[0] == "0" and t.isdigit():
            return int(t, 8)
        return int(t, 10)
    except ValueError:
        raise PTXSyntaxError(f"line {line}: bad integer literal {text!r}") from None


def split_opcode(name: str):
    parts = name.split(".")
    mods = tuple(p for p in parts[1:] if p not in TYPE_BITS)
    types = tuple(p for p in parts[1:] if p in TYPE_BITS)
    return parts[0], mods, types


class _Parser:
    def __init__(self, text: str):
        self.toks = tokenize(text)
        self.i = 0
        self.cur_regs = set()    # registers declared so far in the current function

    # -- token helpers (newlines are skipped except where a directive ends at end of line) --
    def peek(self, skip_nl=True):
        i = self.i
        while skip_nl and self.toks[i].kind == "nl":
            i += 1
        return self.toks[i]

    def next(self, skip_nl=True):
        while skip_nl and self.toks[self.i].kind == "nl":
            self.i += 1
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def expect(self, text, what=None):
        t = self.next()
        if t.text != text:
            raise PTXSyntaxError(f"line {t.line}: expected {what or repr(text)}, found {t.text or 'end of file'!r}")
        return t

    def accept(self, text):
        if self.peek().text == text:
            return self.next()
        return None

    def error(self, tok, msg):
        raise PTXSyntaxError(f"line {tok.line}: {msg}")

    def rest_of_line(self):
        out = []
        while self.toks[self.i].kind not in ("nl", "eof"):
            out.append(self.toks[self.i].text)
            self.i += 1
        return " ".join(out)

    # -- module --
    def parse_module(self) -> Module:
        mod = Module()
        while True:
            t = self.peek()
            if t.kind == "eof":
                break
            self.next()
            s = t.text
            if s == ".version":
                v = self.next()
                mod.version = v.text
            elif s == ".target":
                mod.target = self.rest_of_line().replace(" ,", ",")
            elif s == ".address_size":
                v = self.next()
                mod.address_size = parse_int(v.text, v.line)
                if mod.address_size != 64:
                    mod.unsupported.append((t.line, f".address_size {mod.address_size} (only 64)"))
            elif s in (".file", ".loc"):
                self.rest_of_line()
            elif s == ".section":
                self.skip_section(t)
            elif s in (".visible", ".extern", ".weak", ".common"):
                self.parse_linked(mod, t, linkage=s)
            elif s in (".entry", ".func"):
                self.i -= 1
                self.parse_linked(mod, t, linkage=None)
            elif s in (".global", ".shared", ".const", ".local"):
                self.i -= 1
                self.parse_linked(mod, t, linkage=None)
            elif s == ";":
                continue
            else:
                self.error(t, f"unexpected {s!r} at module level")
        return mod

    def skip_section(self, t):
        self.next()  # name
        self.expect("{")
        depth = 1
        while depth:
            u = self.next()
            if u.kind == "eof":
                self.error(t, "unterminated .section")
            depth += u.text == "{"
            depth -= u.text == "}"

    def parse_linked(self, mod, t0, linkage):
        t = self.next()
        if t.text in (".entry", ".func"):
            k = self.parse_function(t)
            k.module = mod
            if k.name in mod.kernels:
                prev = mod.kernels[k.name]
                if prev.instructions and k.instructions:
                    self.error(t, f"function {k.name!r} defined twice")
                if k.instructions or not prev.instructions:
                    mod.kernels[k.name] = k
            else:
                mod.kernels[k.name] = k
        elif t.text in (".global", ".shared", ".const", ".local"):
            v = self.parse_var(t, extern=(linkage == ".extern"))
            mod.vars.append(v)
        else:
            self.error(t, f"expected .entry, .func or a variable after {t0.text!r}, found {t.text!r}")

    def parse_param_list(self, is_entry):
        params = []
        self.expect("(")
        if self.accept(")"):
            return params
        while True:
            t = self.next()
            if t.text not in (".param", ".reg"):
                self.error(t, f"expected .param, found {t.text!r}")
            p = self.parse_param_decl(t)
            params.append(p)
            if self.accept(")"):
                return params
            self.expect(",", "',' or ')' in the parameter list")

    def parse_param_decl(self, t):
        align = None
        typ = None
        ptr = False
        while True:
            u = self.next()
            if u.text == ".align":
                a = self.next()
                align = parse_int(a.text, a.line)
            elif u.text == ".ptr":
                ptr = True
            elif u.text in (".global", ".shared", ".const", ".local"):
                continue   # .ptr.global etc. attributes
            elif u.text.startswith(".") and u.text[1:] in TYPE_BITS:
                typ = u.text[1:]
            elif u.text.startswith(".ptr"):
                ptr = True
            elif u.kind == "ident" and not u.text.startswith("."):
                name = u.text
                break
            else:
                self.error(u, f"unexpected {u.text!r} in a parameter declaration")
        if typ is None:
            self.error(t, f"parameter {name!r} has no type")
        array = None
        if self.accept("["):
            n = self.next()
            array = parse_int(n.text, n.line)
            self.expect("]")
        return Param(name=name, type=typ, line=t.line, align=align, array=array, ptr=ptr)

    def parse_function(self, t):
        is_entry = t.text == ".entry"
        ret_params = []
        if not is_entry and self.peek().text == "(":
            ret_params = self.parse_param_list(False)
        name_tok = self.next()
        if name_tok.kind != "ident":
            self.error(name_tok, f"expected a function name, found {name_tok.text!r}")
        k = Kernel(name=name_tok.text, line=t.line, is_entry=is_entry)
        self.cur_regs = set()
        if self.peek().text == "(":
            k.params = self.parse_param_list(is_entry)
        if ret_params:
            k.directives.append((t.line, "return parameters"))
        # performance directives: .maxntid 128, 1, 1 / .reqntid / .minnctapersm / .noreturn ...
        while self.peek().text.startswith(".") and self.peek().text not in (".entry", ".func"):
            d = self.next()
            args = [d.text]
            while self.peek().kind == "num" or self.peek().text == ",":
                args.append(self.next().text)
            k.directives.append((d.line, " ".join(args)))
        if self.accept(";"):
            return k    # a prototype / declaration only
        self.expect("{", "'{' to open the function body")
        self.parse_body(k, depth=1)
        # every branch target must be a label of this function
        for ins in k.instructions:
            if ins.opcode in ("bra", "brx"):
                for op in ins.operands:
                    if isinstance(op, Sym) and op.name not in k.labels:
                        raise PTXSyntaxError(f"line {ins.line}: branch to undefined label {op.name!r}")
        return k

    def parse_var(self, t, extern=False):
        space = t.text[1:]
        align = None
        typ = None
        while True:
            u = self.next()
            if u.text == ".align":
                a = self.next()
                align = parse_int(a.text, a.line)
            elif u.text.startswith(".") and u.text[1:] in TYPE_BITS:
                typ = u.text[1:]
            elif u.text.startswith(".v") and u.text[2:].isdigit():
                self.error(u, "vector variables are not supported")
            elif u.kind == "ident" and not u.text.startswith("."):
                name = u.text
                break
            else:
                self.error(u, f"unexpected {u.text!r} in a .{space} declaration")
        if typ is None:
            self.error(t, f"variable {name!r} has no type")
        array = None
        while self.accept("["):
            if array is None:
                array = []
            if self.accept("]"):
                array.append(None)
                continue
            n = self.next()
            array.append(parse_int(n.text, n.line))
            self.expect("]")
        init = None
        if self.accept("="):
            init = []
            if self.accept("{"):
                while not self.accept("}"):
                    v = self.next()
                    if v.text == ",":
                        continue
                    neg = v.text == "-"
                    if neg:
                        v = self.next()
                    if v.kind == "num":
                        init.append(-parse_int(v.text, v.line) if neg else parse_int(v.text, v.line))
                    elif v.kind == "fimm":
                        init.append(int(v.text[2:], 16))
                    else:
                        self.error(v, f"unsupported initialiser {v.text!r}")
            else:
                v = self.next()
                init.append(parse_int(v.text, v.line) if v.kind == "num" else v.text)
        self.expect(";")
        if array and array[0] is None:
            if len(array) != 1:
                self.error(t, "only the first dimension may be unsized")
            array = []
        return VarDecl(space=space, name=name, type=typ, line=t.line, align=align, array=array,
                       extern=extern, init=init)

    def parse_body(self, k: Kernel, depth):
        while True:
            t = self.peek()
            if t.kind == "eof":
                self.error(t, f"unterminated body of {k.name!r}")
            if t.text == "}":
                self.next()
                return
            if t.text == "{":
                self.next()
                self.parse_body(k, depth + 1)
                continue
            if t.text == ";":
                self.next()
                continue
            if t.text == ".reg":
                self.next()
                self.parse_reg(k, t)
                continue
            if t.text in (".local", ".shared", ".global", ".const"):
                self.next()
                k.vars.append(self.parse_var(t))
                continue
            if t.text in (".pragma",):
                self.next()
                s = self.next()
                self.expect(";")
                k.directives.append((t.line, f".pragma {s.text}"))
                continue
            if t.text in (".loc", ".file"):
                self.next()
                self.rest_of_line()
                continue
            if t.text == ".param":
                self.next()
                p = self.parse_param_decl(t)
                self.expect(";")
                k.directives.append((t.line, f".param {p.name} declared in the body"))
                continue
            if t.kind == "ident" and not t.text.startswith(".") and self.toks[self._after(t)].text == ":":
                self.next()
                self.next()
                if t.text in k.labels:
                    self.error(t, f"label {t.text!r} defined twice")
                k.labels[t.text] = len(k.instructions)
                continue
            if t.text.startswith(".") and t.text != ".":
                self.next()
                self.error(t, f"unexpected directive {t.text!r} in a function body")
            k.instructions.append(self.parse_instruction())

    def _after(self, t):
        # index of the token after the one peek() returned
        i = self.i
        while self.toks[i].kind == "nl":
            i += 1
        return i + 1

    def parse_reg(self, k, t):
        u = self.next()
        if u.text.startswith(".v"):
            self.error(u, "vector register declarations are not supported")
        if not (u.text.startswith(".") and u.text[1:] in TYPE_BITS):
            self.error(u, f"expected a register type after .reg, found {u.text!r}")
        typ = u.text[1:]
        names = []
        while True:
            n = self.next()
            if n.kind != "ident" or n.text.startswith("."):
                self.error(n, f"expected a register name, found {n.text!r}")
            if self.accept("<"):
                c = self.next()
                count = parse_int(c.text, c.line)
                self.expect(">")
                names.extend(f"{n.text}{i}" for i in range(count))
            else:
                names.append(n.text)
            self.cur_regs.update(names)
            if self.accept(";"):
                break
            self.expect(",", "',' or ';' in a .reg declaration")
        k.regs.append(RegDecl(type=typ, names=names, line=t.line))

    def parse_instruction(self) -> Instruction:
        t = self.next()
        guard = None
        if t.text == "@":
            neg = bool(self.accept("!"))
            g = self.next()
            if g.kind != "ident" or not (g.text.startswith("%") or g.text in self.cur_regs):
                self.error(g, f"expected a predicate register after '@', found {g.text!r}")
            guard = Guard(g.text, neg)
            t = self.next()
        if t.kind != "ident" or t.text.startswith(("%", ".", "$")):
            self.error(t, f"expected an instruction, found {t.text!r}")
        opcode, mods, types = split_opcode(t.text)
        operands = []
        if not self.accept(";"):
            while True:
                operands.append(self.parse_operand())
                if self.accept(";"):
                    break
                u = self.next()
                if u.text != ",":
                    self.error(u, f"expected ',' or ';' after an operand of {t.text}, found {u.text!r}")
        return Instruction(opcode=opcode, modifiers=mods, types=types, guard=guard,
                           operands=operands, line=t.line, name=t.text)

    def parse_operand(self, in_vec=False):
        t = self.next()
        if t.text == "{" and not in_vec:
            elems = []
            while True:
                elems.append(self.parse_operand(in_vec=True))
                u = self.next()
                if u.text == "}":
                    break
                if u.text != ",":
                    self.error(u, f"expected ',' or '}}' in a vector operand, found {u.text!r}")
            return Vec(tuple(elems))
        if t.text == "[" and not in_vec:
            return self.parse_address(t)
        if t.text == "(" and not in_vec:
            # call argument lists `(a, b)`: parsed (so the validator can name the call) as a Vec
            elems = []
            if self.accept(")"):
                return Vec(())
            while True:
                elems.append(self.parse_operand(in_vec=True))
                u = self.next()
                if u.text == ")":
                    return Vec(tuple(elems))
                if u.text != ",":
                    self.error(u, f"expected ',' or ')' in an argument list, found {u.text!r}")
        if t.text == "-":
            u = self.next()
            if u.kind == "num":
                return Imm(-parse_int(u.text, u.line))
            self.error(u, f"expected a number after '-', found {u.text!r}")
        if t.text == "!":
            self.error(t, "negated predicate operands are not supported")
        if t.kind == "num":
            if "." in t.text or ("e" in t.text.lower() and not t.text.lower().startswith("0x")):
                self.error(t, f"decimal float literal {t.text!r} is not supported (use 0f hex)")
            return Imm(parse_int(t.text, t.line))
        if t.kind == "fimm":
            return FImm(int(t.text[2:], 16), 32 if t.text[1] in "fF" else 64)
        if t.kind == "ident" and not t.text.startswith("."):
            if t.text == "_":
                first = Sink()
            elif t.text.startswith("%") or t.text in self.cur_regs:
                first = Reg(t.text)     # (inline asm may declare registers without a %)
            else:
                first = Sym(t.text)
            if self.peek().text == "|" and not in_vec:
                self.next()
                u = self.next()
                second = Sink() if u.text == "_" else Reg(u.text)
                return Pair(first, second)
            if isinstance(first, Sym) and self.peek().text in ("+", "-") and not in_vec:
                sign = self.next().text
                u = self.next()
                off = parse_int(u.text, u.line)
                return Addr(first, off if sign == "+" else -off)  # sym+imm as a value
            return first
        self.error(t, f"unexpected {t.text!r} in an operand")

    def parse_address(self, t):
        u = self.next()
        base = None
        off = 0
        if u.kind == "ident":
            base = Reg(u.text) if u.text.startswith("%") or u.text in self.cur_regs else Sym(u.text)
            v = self.next()
            if v.text in ("+", "-"):
                sign = -1 if v.text == "-" else 1
                w = self.next()
                if w.text == "-":
                    sign = -sign
                    w = self.next()
                if w.kind != "num":
                    self.error(w, f"expected an offset in an address, found {w.text!r}")
                off = sign * parse_int(w.text, w.line)
                v = self.next()
            if v.text == "," and isinstance(base, Sym):
                # texture/surface operand `[tex, {coords}]`: kept as a Vec for the validator
                rest = [base]
                while v.text == ",":
                    rest.append(self.parse_operand())
                    v = self.next()
                if v.text != "]":
                    self.error(v, f"expected ']' to close an address, found {v.text!r}")
                return Vec(tuple(rest))
            if v.text != "]":
                self.error(v, f"expected ']' to close an address, found {v.text!r}")
        elif u.kind == "num" or u.text == "-":
            sign = 1
            if u.text == "-":
                sign = -1
                u = self.next()
            off = sign * parse_int(u.text, u.line)
            self.expect("]")
        else:
            self.error(u, f"unexpected {u.text!r} in an address")
        return Addr(base, off)


def parse_instruction(text: str, line: int = 0, regs=()) -> Instruction:
    """One instruction (`[@p] opcode operands;`), as the lowering writes new code; `regs`: declared
    register names that do not start with `%` (inline-asm scopes declare such)."""
    p = _Parser(text)
    p.cur_regs = set(regs)
    ins = p.parse_instruction()
    ins.line = line
    return ins


def parse_ptx(text: str) -> Module:
    """Parse PTX text into a Module. Raises PTXSyntaxError (with a line number) on bad input."""
    return _Parser(text).parse_module()
