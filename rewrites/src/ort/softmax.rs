//! QLinearSoftmax (never exact; modelled so the audit can say so).
