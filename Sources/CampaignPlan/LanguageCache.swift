#if canImport(Glibc)
import Glibc
#endif
import CampaignPayload

/// Remembers which message each distinct language value selects; audiences
/// have few distinct values, so a short list compared byte for byte beats
/// hashing a new key per row.
struct LanguageCache {
    /// The values seen, one after another; `ends[i]` is where value `i` ends.
    private var keys: [UInt8] = []
    private var ends: [Int] = []
    private var results: [Int?] = []
    private var overflow: [String: Int?] = [:]
    /// Rows of one language often come together: that one is tried first.
    private var last = -1

    mutating func message(for raw: UnsafeBufferPointer<UInt8>, selector: MessageSelector) -> Int? {
        let found = keys.withUnsafeBufferPointer { k -> Int in
            func matches(_ i: Int) -> Bool {
                let start = i == 0 ? 0 : ends[i - 1]
                return ends[i] - start == raw.count && (raw.isEmpty || memcmp(k.baseAddress! + start, raw.baseAddress!, raw.count) == 0)
            }
            if last >= 0, matches(last) { return last }
            for i in ends.indices where matches(i) { return i }
            return -1
        }
        if found >= 0 {
            last = found
            return results[found]
        }
        let text = String(decoding: raw, as: UTF8.self)
        if ends.count >= 256 {
            if let cached = overflow[text] { return cached }
            let result = selector.select(LanguageTag(text))
            // Bounded: an audience with a new language value on every row must
            // not grow memory with the audience.
            if overflow.count < 16_384 { overflow[text] = result }
            return result
        }
        let result = selector.select(LanguageTag(text))
        keys.append(contentsOf: raw)
        ends.append(keys.count)
        results.append(result)
        return result
    }
}
