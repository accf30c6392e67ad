import CNGHTTP2

/// An nghttp2 failure, as one sentence.
public struct H2Error: Error, Equatable, Sendable, CustomStringConvertible {
    public var code: Int32
    public var what: String

    public init(code: Int32 = 0, _ what: String) { (self.code, self.what) = (code, what) }

    public var description: String {
        code == 0 ? what : "\(what): \(String(cString: nghttp2_strerror(code)))"
    }
}
