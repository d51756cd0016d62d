"""Math answers: a restricted parser (text in, sympy objects out, without ``eval``) and the ``math_equivalence``
reward built on it.

Modules: :mod:`~genalign.rewards.math_answers.syntax` (the syntax tree and :class:`~genalign.rewards.math_answers.syntax.MathParseError`),
:mod:`~genalign.rewards.math_answers.tokenizer`, :mod:`~genalign.rewards.math_answers.parser` (:func:`parse_math`),
:mod:`~genalign.rewards.math_answers.symbolic` (sympy objects and their comparison), :mod:`~genalign.rewards.math_answers.sympy_worker`
(comparisons in a worker process with a timeout), :mod:`~genalign.rewards.math_answers.equivalence` (comparing final answers;
the ``math_equivalence`` reward), :mod:`~genalign.rewards.math_answers.math_verify_grader` (the optional
``math_verify_equivalence`` reward: Hugging Face's math-verify, run only inside the sandbox, with the program it runs
there in :mod:`~genalign.rewards.math_answers.math_verify_program`). The two graders side by side:
``benchmarks/grader_comparison.py`` and docs/rewards_math.md.

Model-written answers are untrusted text. sympy's ``sympify``/``parse_expr`` (and ``parse_latex`` on top of them) run
Python ``eval`` on the text, so ``\\boxed{__import__('os').system(...)}`` would execute. This package instead tokenizes
the answer, parses it with a small recursive-descent grammar into a tree of plain nodes, and builds sympy objects
directly through their constructors (``Integer``, ``Rational``, ``Symbol``, ``Add``, ``Mul``, ``Pow``, ``sqrt``,
``root``, ``pi``, ``E``, ``oo``). No string ever reaches ``eval``, ``exec``, ``sympify`` or ``parse_expr``; anything
outside the grammar raises :class:`~genalign.rewards.math_answers.syntax.MathParseError`.

**Grammar** (the answers of GSM8K / MATH-style datasets)::

    answer   := list ('\\cup' expr)*                   a union of intervals or sets (in any order)
    list     := expr (',' expr)*                     a bare list "1, 2" is a tuple without brackets
    expr     := term (('+' | '-') term)*
    term     := unary ((('*' | '\\cdot' | '\\times' | '/' | '\\div') unary) | implicit)*
    implicit := a factor starting with a letter, a constant, '(', '{', '\\frac', '\\sqrt' (not a number: "2 3" fails)
    unary    := ('-' | '+') unary | power
    power    := atom '%'? ('^' | '**') exponent       exponent := '{' expr '}' | unary  (right-associative)
    atom     := number | letter | '\\pi' | '\\infty' | '(' list ')' | '[' list ']' | '(' a ',' b ']' | ...
              | '\\{' list '\\}'                        a set: its items compare in any order
              | '\\begin{pmatrix}' row ('\\\\' row)* '\\end{pmatrix}'   row := expr ('&' expr)*; also bmatrix, matrix
              | '{' expr '}' | '\\frac' arg arg | '\\sqrt' ('[' expr ']')? arg
    arg      := '{' expr '}' | '(' expr ')' | one token (\\frac12: one digit each)

Numbers: ``12``, ``-0.5``, ``.5``, ``1,000`` and ``1{,}000`` (thousands separators: groups of exactly three digits),
``1.5e-3`` (scientific notation only written without spaces, exponent at most 400). ``\\frac``, ``\\dfrac`` and
``\\tfrac`` are the same; ``\\frac12`` is ``1/2``; an integer directly followed by a fraction of integers is a mixed
number (``2\\frac{1}{2}`` is ``5/2``, as in MATH answers). Ignored decoration: ``$``, ``\\$``, ``\\left``/``\\right``,
``\\displaystyle``, LaTeX spacing (``\\,``, ``\\ ``, ``~``, ``\\quad``...), ``%``/``\\%`` (``50\\%`` is ``50``, as before),
degrees ``^\\circ``. ``\\text{..}``, ``\\mathrm{..}``, ``\\mbox{..}``, ``\\textbf{..}`` are units and are dropped at the
start or end of the answer (``5\\text{ cm}^2`` is ``5``); anywhere else they are a parse failure. Up to three plain
words of two letters or more that end the answer after a value and a space are units too (``5 cm``, ``12 square
units``; not ``sqrt``/``pi``, and not a word glued to the number: ``3ab`` fails). A single letter stays a variable
(``315 m`` is ``315*m``).

**Comparison** (:mod:`~genalign.rewards.math_answers.equivalence`): integers and fractions compare exactly; a number
written with a decimal point or an exponent within a relative tolerance; values symbolically; tuples, intervals and
matrices entry by entry with the same brackets (``pmatrix`` and ``bmatrix`` are the same matrix); sets and unions in
any order. An answer ``x = <value>`` (one letter) is compared as ``<value>`` when the other answer is not an equation;
equations themselves (``x=5`` against ``y=5``) are outside the grammar.

**Letters.** A single letter is a variable (``Symbol``), except ``e``, which is always Euler's number (a lone ``e``
in a final answer is the constant far more often than a variable; the choice is the same on both sides of a
comparison, so it only matters against a numeric answer). ``i`` is a plain variable, not the imaginary unit, so
``4i+3`` equals ``3+4i`` but ``(1+i)^2`` does not equal ``2i``. A run of two or more letters (``xy``, ``sin``,
``import``, ``open``) is a parse failure, except ``sqrt`` and ``pi`` (``sqrt(2)``, ``2pi``): a product of variables
needs a space or an operator (``2x y``, ``2x*y``), so that ``ABC`` and ``ACB`` do not become equal products. Quotes,
``_``, ``.`` attribute access, ``=``, ``!``, ``|``, unknown commands, environments and functions (``\\sin``, ``\\log``,
``\\begin{vmatrix}``) are parse failures too.

**Size limits**, so that building the objects is cheap: at most 300 characters, 40 levels of nesting, and a power of
numbers is only built when the result stays small (at most 100,000 bits for a rational base; exponent at most
10,000 for another constant base). Beyond that the answer is a parse failure.
"""
