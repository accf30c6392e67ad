extension StringProtocol {
    /// The text without white space (spaces, tabs, CR, LF…) at either end.
    /// The project's one trimmer; a name of its own, so it never shadows
    /// Foundation's `trimmingCharacters(in:)`.
    public func trimmingWhitespace() -> SubSequence {
        var s = self[...]
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return s
    }
}
