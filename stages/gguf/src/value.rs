//! Typed GGUF metadata values.

/// The type tag of a metadata value, with its GGUF id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// id 0
    U8,
    /// id 1
    I8,
    /// id 2
    U16,
    /// id 3
    I16,
    /// id 4
    U32,
    /// id 5
    I32,
    /// id 6
    F32,
    /// id 7 (one byte, 0 or 1)
    Bool,
    /// id 8 (u64 length + UTF-8 bytes)
    String,
    /// id 9 (u32 element type, u64 count, elements)
    Array,
    /// id 10
    U64,
    /// id 11
    I64,
    /// id 12
    F64,
}

impl ValueType {
    /// The GGUF id of the type.
    pub fn id(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    /// The type for a GGUF id, `None` if the id is not defined.
    pub fn from_id(id: u32) -> Option<ValueType> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// Lower-case name as `skyctl inspect` prints it ("u32", "string", "array").
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// Encoded size of one value of a fixed-width type; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The least number of bytes one value of this type takes in a file.
    pub(crate) fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            t => t.fixed_size().unwrap_or(1),
        }
    }
}

impl std::fmt::Display for ValueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A GGUF array: one element type, any number of items (all of that type).
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// Type of every item.
    pub elem_type: ValueType,
    /// The items.
    pub items: Vec<Value>,
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// f32
    F32(f32),
    /// bool
    Bool(bool),
    /// UTF-8 string
    String(String),
    /// array (possibly of strings or of arrays)
    Array(Array),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f64
    F64(f64),
}

impl Value {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as u32, if it is an integer that fits.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    /// The value as u64, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as i64, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as f32, if it is an f32 (or an f64, rounded).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// The value as f64, if it is a float.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The string, if the value is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The bool, if the value is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The array, if the value is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// An array of strings.
    pub fn string_array<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Value {
        Value::Array(Array {
            elem_type: ValueType::String,
            items: items.into_iter().map(|s| Value::String(s.into())).collect(),
        })
    }

    /// An array of i32.
    pub fn i32_array(items: impl IntoIterator<Item = i32>) -> Value {
        Value::Array(Array {
            elem_type: ValueType::I32,
            items: items.into_iter().map(Value::I32).collect(),
        })
    }

    /// An array of u32.
    pub fn u32_array(items: impl IntoIterator<Item = u32>) -> Value {
        Value::Array(Array {
            elem_type: ValueType::U32,
            items: items.into_iter().map(Value::U32).collect(),
        })
    }

    /// An array of f32.
    pub fn f32_array(items: impl IntoIterator<Item = f32>) -> Value {
        Value::Array(Array {
            elem_type: ValueType::F32,
            items: items.into_iter().map(Value::F32).collect(),
        })
    }

    /// An array of arbitrary values of one type. Fails (returns `None`) if an item's type
    /// differs from `elem_type`.
    pub fn array(elem_type: ValueType, items: Vec<Value>) -> Option<Value> {
        if items.iter().any(|v| v.value_type() != elem_type) {
            return None;
        }
        Some(Value::Array(Array { elem_type, items }))
    }
}

macro_rules! impl_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x)
            }
        }
    )*};
}
impl_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, Array => Array, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::String(s.clone())
    }
}
