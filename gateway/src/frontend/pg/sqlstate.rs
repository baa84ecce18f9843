//! Neutral error kinds → PostgreSQL SQLSTATE codes.

use lakegate_engines::ErrorKind;

/// The SQLSTATE clients expect for `kind`.
pub(crate) fn sqlstate(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Syntax => "42601",
        ErrorKind::UndefinedTable => "42P01",
        ErrorKind::UndefinedColumn => "42703",
        ErrorKind::UndefinedObject => "42704",
        ErrorKind::UndefinedFunction => "42883",
        ErrorKind::Unsupported => "0A000",
        ErrorKind::InvalidParameter => "22023",
        ErrorKind::DatatypeMismatch => "42804",
        ErrorKind::DataException => "22000",
        ErrorKind::NumericOutOfRange => "22003",
        ErrorKind::DivisionByZero => "22012",
        ErrorKind::Canceled => "57014",
        ErrorKind::UndefinedCursor => "34000",
        ErrorKind::UndefinedPreparedStatement => "26000",
        ErrorKind::DuplicateCursor => "42P03",
        ErrorKind::TransactionAborted => "25P02",
        ErrorKind::CantChangeSetting => "55P02",
        ErrorKind::Unavailable => "58000",
        ErrorKind::UndefinedFile => "58P01",
        ErrorKind::StorageDenied => "58030",
        ErrorKind::TooManyQueries => "53300",
        ErrorKind::InsufficientPrivilege => "42501",
        ErrorKind::LimitExceeded => "54000",
        ErrorKind::TooComplex => "54001",
        ErrorKind::Internal => "XX000",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_clients_branch_on() {
        assert_eq!(sqlstate(ErrorKind::Syntax), "42601");
        assert_eq!(sqlstate(ErrorKind::UndefinedTable), "42P01");
        assert_eq!(sqlstate(ErrorKind::UndefinedColumn), "42703");
        assert_eq!(sqlstate(ErrorKind::Unsupported), "0A000");
        assert_eq!(sqlstate(ErrorKind::Canceled), "57014");
        assert_eq!(sqlstate(ErrorKind::TransactionAborted), "25P02");
    }
}
