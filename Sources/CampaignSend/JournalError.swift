/// A journal that cannot be used.
public struct JournalError: Error, Equatable, Sendable, CustomStringConvertible {
    public var path: String
    public var reason: String
    /// Another send holds the journal: a temporary failure, not a bad input.
    public var isBusy = false

    public init(path: String, reason: String, isBusy: Bool = false) {
        (self.path, self.reason, self.isBusy) = (path, reason, isBusy)
    }

    public var description: String { "\(path): \(reason)." }
}
