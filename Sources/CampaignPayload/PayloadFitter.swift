import CampaignJSON

/// Shortens the one shortenable text of a rendered payload until the payload
/// fits: on a grapheme-cluster boundary (never inside an emoji, a flag or a
/// letter with combining marks, so never inside a UTF-8 sequence), at a word
/// end when that costs at most ``wordEndAllowance`` bytes, then "…". It keeps
/// the longest text that fits, counting bytes after JSON escaping.
public enum PayloadFitter {
    public static let ellipsis: [UInt8] = Array("…".utf8)
    public static let wordEndAllowance = 8

    /// `textRange` holds the escaped text inside its quotes.
    static func shorten(_ out: inout [UInt8], textRange: Range<Int>, maxBytes: Int) -> RenderOutcome {
        let fixed = out.count - textRange.count
        let available = maxBytes - fixed
        guard available >= 0 else { return .cannotFit(minimumBytes: fixed) }
        let text = unescape(out[textRange])
        let chosen = longestPrefix(of: text, escapedBudget: available - ellipsis.count)
        var replacement: [UInt8] = []
        if !chosen.isEmpty {
            JSONText.appendEscaped(Array(chosen.utf8), to: &replacement)
        }
        let dropped = textRange.count - replacement.count
        if available >= ellipsis.count { replacement += ellipsis }
        out.replaceSubrange(textRange, with: replacement)
        return .truncated(droppedBytes: dropped)
    }

    /// The longest grapheme-cluster prefix whose escaped size is within budget,
    /// moved back to a word end when the partial word given up is at most the allowance, with
    /// trailing spaces removed.
    static func longestPrefix(of text: String, escapedBudget: Int) -> Substring {
        guard escapedBudget > 0 else { return "" }
        var used = 0
        var end = text.startIndex
        for index in text.indices {
            let cost = JSONText.escapedCount(Array(text[index].utf8))
            if used + cost > escapedBudget { break }
            used += cost
            end = text.index(after: index)
        }
        var prefix = text[..<end]
        let cutsAWord = end < text.endIndex && !text[end].isWhitespace && !(prefix.last?.isWhitespace ?? true)
        if cutsAWord, let space = prefix.lastIndex(where: \.isWhitespace) {
            // The cost is the partial word given up, not the space before it.
            let cost = JSONText.escapedCount(Array(prefix[prefix.index(after: space)...].utf8))
            if cost <= wordEndAllowance { prefix = prefix[..<space] }
        }
        while let last = prefix.last, last.isWhitespace { prefix = prefix.dropLast() }
        return prefix
    }

    /// The text of the escaped region: it is the inside of a JSON string our
    /// escaper wrote, so the JSON parser reads it back.
    static func unescape(_ bytes: ArraySlice<UInt8>) -> String {
        let quoted = [UInt8(ascii: "\"")] + bytes + [UInt8(ascii: "\"")]
        return (try? JSONValue.parse(quoted))?.stringValue ?? String(decoding: bytes, as: UTF8.self)
    }
}
