//! ORT 1.31's QDQ selector rules: which groups its optimizer fuses.
